"""The boot's lookups as columns (``flavors.get_snapshot``, ``images.find_image_row``)
find and refuse exactly what the ORM lookups every other request uses find and refuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from compute import images
from models import Flavor
from models.db import session_scope
from models.flavor import FlavorSnapshot
from novaq.exceptions import FlavorNotFound, ImageNotFound, InvalidInput
from novaq.settings import get_settings
from tests.factories import CIRROS_ID, make_image
from workflows import api
from workflows.api import flavors


def _both(db_url: str, ref: str, project: str | None = None) -> tuple[Any, Any]:
    with session_scope(db_url, read_only=True) as session:
        row = flavors.get_flavor(session, ref, project)
        by_orm = (FlavorSnapshot.from_row(row), row.id)
        return by_orm, flavors.get_snapshot(session, ref, project)


def _refused_by_both(db_url: str, ref: str, project: str | None = None) -> None:
    for lookup in (flavors.get_flavor, flavors.get_snapshot):
        with session_scope(db_url, read_only=True) as session, pytest.raises(FlavorNotFound):
            lookup(session, ref, project)


def test_get_snapshot_gives_get_flavors_snapshot_with_its_extra_specs_in_order(
    db_url: str,
) -> None:
    api.create_flavor("m1", 2, 1024, 1)
    api.set_flavor_extra_specs(
        "m1", {"hw:cpu_policy": "shared", "aggregate_instance_extra_specs:a": "b"}
    )
    by_orm, by_columns = _both(db_url, "m1")
    assert by_columns == by_orm
    assert list(by_columns[0].extra_specs) == list(by_orm[0].extra_specs)
    assert _both(db_url, by_orm[0].flavorid)[1] == by_orm  # by flavor id too


def test_get_snapshot_refuses_a_disabled_flavor_and_a_private_one_the_project_may_not_use(
    db_url: str,
) -> None:
    api.create_flavor("private", 1, 512, 1, is_public=False)
    api.create_flavor("off", 1, 512, 1)
    with session_scope(db_url) as session:
        session.execute(update(Flavor).where(Flavor.name == "off").values(disabled=True))
    _refused_by_both(db_url, "off")
    _refused_by_both(db_url, "private", "p1")
    _refused_by_both(db_url, "nowhere")
    assert _both(db_url, "private")[1] == _both(db_url, "private")[0]  # the operator
    api.add_flavor_access("private", "p1")
    by_orm, by_columns = _both(db_url, "private", "p1")
    assert by_columns == by_orm


def test_find_image_row_finds_and_refuses_as_find_image(db_url: str) -> None:
    data: Path = get_settings().image_store_path / CIRROS_ID
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(b"\0" * 1024)
    first = make_image(db_url, data, name="twin", properties={"os_type": "linux"})
    make_image(db_url, data, name="twin")
    single = make_image(db_url, data, name="single")
    with session_scope(db_url, read_only=True) as session:
        for ref in (first, single, "single"):
            image, row = images.find_image(session, ref), images.find_image_row(session, ref)
            assert (row.id, row.name, row.properties) == (image.id, image.name, image.properties)
        for ref, error in (("twin", InvalidInput), ("none", ImageNotFound), ("", InvalidInput)):
            for lookup in (images.find_image, images.find_image_row):
                with pytest.raises(error):
                    lookup(session, ref)
