"""``wait`` ends when the operation ends (issue 15, defect 2): a move no host can take
ends the wait at once with its fault, not at the timeout; a status word that does not
exist is refused, naming the ones that do."""

from __future__ import annotations

import time

import pytest

from novaq.exceptions import InvalidInput, OperationFailed
from tests.unit.workflows.servers import boot_active, delete_and_wait
from workflows import api


def test_a_migrate_no_host_can_take_ends_the_wait_at_once_with_its_fault(
    db_url: str, worker: None
) -> None:
    uuid = boot_active()
    request_id = api.migrate(uuid)  # host1 is the only host: NoValidHost
    started = time.monotonic()
    with pytest.raises(OperationFailed, match="No valid host was found") as raised:
        api.wait(uuid, "VERIFY_RESIZE", timeout=60, request_id=request_id)
    assert time.monotonic() - started < 15
    assert raised.value.kwargs["status"] == "ACTIVE"
    delete_and_wait(uuid)
