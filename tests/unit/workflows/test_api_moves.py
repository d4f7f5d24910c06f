"""The resize API's disk rule: a flavor whose root or ephemeral disk is smaller than the
server's is refused (Nova's "Unable to resize disk down.") before anything is written or
enqueued."""

from __future__ import annotations

import pytest

from novaq.exceptions import ResizeError
from tests.factories import flavor_dict
from tests.unit.workflows.servers import action_count, placed_server, queued
from workflows import api

CURRENT = flavor_dict(2, 1024, 4, ephemeral_gb=2)


@pytest.mark.parametrize(
    ("name", "root_gb", "ephemeral_gb"), [("root-smaller", 2, 2), ("eph-smaller", 4, 1)]
)
def test_a_resize_that_would_shrink_a_disk_is_refused_before_anything_happens(
    db_url: str, name: str, root_gb: int, ephemeral_gb: int
) -> None:
    uuid = placed_server(db_url, "active", flavor=CURRENT)
    api.create_flavor(name, 4, 2048, root_gb, ephemeral_gb=ephemeral_gb)
    before = (queued("scheduler"), action_count(db_url), len(api.list_migrations()))

    with pytest.raises(ResizeError, match="Resize error: Unable to resize disk down."):
        api.resize(uuid, name)

    assert (queued("scheduler"), action_count(db_url), len(api.list_migrations())) == before
    assert api.show(uuid)["task_state"] is None
