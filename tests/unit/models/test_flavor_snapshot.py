"""Flavor snapshots (an instance's flavor, a migration's old and new, a request spec's) are
one frozen ``FlavorSnapshot`` in Python, stored as the same JSON as before."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from sqlalchemy import select, text

from models import Flavor, FlavorExtraSpec, Instance, Migration
from models.db import session_scope
from models.flavor import FlavorSnapshot
from scheduler.request_spec import RequestSpec
from tests.factories import flavor_dict, make_instance, make_migration

STORED = flavor_dict(2, 2048, 20, ephemeral_gb=1, swap=512, extra_specs={"hw:cpu_policy": "x"})


def _stored(db_url: str, sql: str, uuid: str) -> object:
    with session_scope(db_url) as session:
        value = session.execute(text(sql), {"u": uuid}).scalar_one()
    return json.loads(value) if isinstance(value, str) else value


def test_the_stored_form_round_trips_with_its_keys_in_order() -> None:
    snapshot = FlavorSnapshot.load(STORED)
    assert (snapshot.flavorid, snapshot.name, snapshot.vcpus, snapshot.swap) == (
        "f-2",
        "test.2",
        2,
        512,
    )
    assert snapshot.extra_specs == {"hw:cpu_policy": "x"}
    assert list(snapshot.dump().items()) == list(STORED.items())
    assert FlavorSnapshot.load(snapshot) is snapshot


def test_a_row_snapshot_has_every_key_and_a_partial_one_keeps_its_shape() -> None:
    row = Flavor(flavorid="fid", name="m1", vcpus=1, memory_mb=512, root_gb=1)
    row.ephemeral_gb, row.swap = 0, 0
    row.extra_specs = [FlavorExtraSpec(key="k", value="v")]
    assert FlavorSnapshot.from_row(row).dump() == {
        "id": "fid",
        "name": "m1",
        "vcpus": 1,
        "memory_mb": 512,
        "root_gb": 1,
        "ephemeral_gb": 0,
        "swap": 0,
        "extra_specs": {"k": "v"},
    }
    partial = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
    snapshot = FlavorSnapshot.load(partial)
    assert (snapshot.ephemeral_gb, snapshot.swap, snapshot.extra_specs) == (0, 0, {})
    assert snapshot.dump() == partial


def test_a_bad_snapshot_is_refused_and_a_snapshot_is_frozen() -> None:
    with pytest.raises(ValidationError):
        FlavorSnapshot.load({"vcpus": 1, "memory_mb": 512})  # no root_gb
    with pytest.raises(ValidationError):
        FlavorSnapshot.load({**STORED, "vcpu": 1})  # a typo'd key
    with pytest.raises(ValidationError):
        FlavorSnapshot.load(STORED).vcpus = 4  # type: ignore[misc]


def test_the_instance_column_reads_a_snapshot_and_stores_the_same_json(db_url: str) -> None:
    uuid = make_instance(db_url, flavor=STORED)
    assert _stored(db_url, "SELECT flavor FROM instances WHERE uuid=:u", uuid) == STORED
    with session_scope(db_url) as session:
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert instance.flavor == FlavorSnapshot.load(STORED)
        instance.flavor = flavor_dict(4, 4096, 40)  # type: ignore[assignment]  # as stored
        assert instance.flavor.vcpus == 4
    assert _stored(db_url, "SELECT flavor FROM instances WHERE uuid=:u", uuid) == flavor_dict(
        4, 4096, 40
    )


def test_a_migration_without_flavors_stores_empty_objects_and_reads_none(db_url: str) -> None:
    migration = make_migration(db_url, make_instance(db_url))
    assert _stored(db_url, "SELECT old_flavor FROM migrations WHERE uuid=:u", migration) == {}
    with session_scope(db_url) as session:
        row = session.scalars(select(Migration).where(Migration.uuid == migration)).one()
        assert (row.old_flavor, row.new_flavor) == (None, None)
        with pytest.raises(ValueError, match="no flavors"):
            _ = row.flavors
        row.old_flavor, row.new_flavor = STORED, flavor_dict(4, 4096, 40)  # type: ignore[assignment]
    with session_scope(db_url) as session:
        row = session.scalars(select(Migration).where(Migration.uuid == migration)).one()
        assert row.flavors.old == FlavorSnapshot.load(STORED)
        assert row.flavors.new.vcpus == 4
    assert _stored(db_url, "SELECT old_flavor FROM migrations WHERE uuid=:u", migration) == STORED


def test_a_request_spec_holds_a_snapshot_and_dumps_the_stored_form() -> None:
    spec = RequestSpec(instance_uuid="i1", flavor=STORED)  # type: ignore[arg-type]
    assert isinstance(spec.flavor, FlavorSnapshot)
    assert spec.to_dict()["flavor"] == STORED
    assert RequestSpec.from_dict(spec.to_dict()) == spec
