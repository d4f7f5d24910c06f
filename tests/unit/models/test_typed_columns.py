"""The state columns hold the same strings and integers as before, read back as enums,
and refuse a value outside their enum; the migration's context and the resize's old
vm_state go through one typed accessor each."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy import select, text

from models import Instance, Migration
from models.db import session_scope
from models.migration_context import MigrationContext
from models.states import MigrationStatus, PowerState, TaskState, VmState
from tests.factories import make_instance, make_migration


def _raw(db_url: str, sql: str, uuid: str) -> tuple[object, ...]:
    with session_scope(db_url) as session:
        return tuple(session.execute(text(sql), {"u": uuid}).one())


def test_instance_states_are_stored_as_nova_strings_and_read_as_enums(db_url: str) -> None:
    uuid = make_instance(db_url, power_state=PowerState.RUNNING)
    assert _raw(
        db_url, "SELECT vm_state, task_state, power_state FROM instances WHERE uuid=:u", uuid
    ) == ("building", "scheduling", 1)
    with session_scope(db_url) as session:
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert (instance.vm_state, instance.task_state) == (VmState.BUILDING, TaskState.SCHEDULING)
        assert instance.power_state is PowerState.RUNNING
        assert instance.vm_state == "building"  # StrEnum: string comparisons keep working


def test_a_string_assigned_is_held_as_its_enum_and_a_typo_is_refused(db_url: str) -> None:
    uuid = make_instance(db_url)
    with session_scope(db_url) as session:
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        instance.vm_state, instance.task_state, instance.power_state = "active", None, 4  # type: ignore[assignment]
        assert instance.vm_state is VmState.ACTIVE
        assert instance.power_state is PowerState.SHUTDOWN
        with pytest.raises(ValueError, match="actve"):
            instance.vm_state = "actve"  # type: ignore[assignment]
    assert _raw(
        db_url, "SELECT vm_state, task_state, power_state FROM instances WHERE uuid=:u", uuid
    ) == ("active", None, 4)


def test_migration_status_and_type_are_stored_as_strings(db_url: str) -> None:
    migration = make_migration(db_url, make_instance(db_url), status="finished")
    assert _raw(
        db_url, "SELECT status, migration_type FROM migrations WHERE uuid=:u", migration
    ) == ("finished", "resize")
    with session_scope(db_url) as session:
        row = session.scalars(select(Migration).where(Migration.uuid == migration)).one()
        assert row.status is MigrationStatus.FINISHED


def test_the_migration_context_is_one_typed_object_stored_as_before(db_url: str) -> None:
    context = MigrationContext(
        request_spec={"flavor": {"name": "m1"}},
        new_pci_requests=({"alias": "a", "count": 1, "vendor_id": "8086", "product_id": "1"},),
        requested_host="host2",
        new_pci_devices=("0000:00:01.0",),
        dest_instances_path="/var/lib/novaq/instances",
    )
    migration = make_migration(db_url, make_instance(db_url), context=context)
    with session_scope(db_url) as session:
        row = session.scalars(select(Migration).where(Migration.uuid == migration)).one()
        assert row.context == context
        stored = session.execute(
            text("SELECT context FROM migrations WHERE uuid=:u"), {"u": migration}
        ).scalar_one()
    assert '"requested_host": "host2"' in stored and "old_pci_devices" not in stored


def test_a_context_given_as_a_dict_is_validated_into_the_model() -> None:
    migration = Migration(context={"request_spec": {}, "dest_instances_path": "/x"})
    assert migration.context == MigrationContext(dest_instances_path="/x")
    with pytest.raises(ValidationError):
        Migration(context={"dest_instance_path": "/x"})  # a typo'd key
    with pytest.raises(ValidationError):
        migration.context.requested_host = "h"  # type: ignore[misc]  # frozen


def test_old_vm_state_is_stashed_read_and_popped_through_one_accessor(db_url: str) -> None:
    uuid = make_instance(db_url, system_metadata={"image_os": "cirros"})
    with session_scope(db_url) as session:
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert instance.old_vm_state is None
        instance.old_vm_state = VmState.STOPPED
    with session_scope(db_url) as session:
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert instance.old_vm_state is VmState.STOPPED
        assert instance.system_metadata == {"image_os": "cirros", "old_vm_state": "stopped"}
        instance.old_vm_state = None
    with session_scope(db_url) as session:
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert instance.system_metadata == {"image_os": "cirros"}


def test_a_filter_on_a_value_outside_the_enum_finds_nothing(db_url: str) -> None:
    make_migration(db_url, make_instance(db_url))
    with session_scope(db_url) as session:
        assert session.scalars(select(Migration).where(Migration.status == "bogus")).all() == []
        assert session.scalars(select(Instance).where(Instance.vm_state == "bogus")).all() == []
