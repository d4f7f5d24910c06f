"""``_sync_scheduler_instance_info`` on a simulated host (libvirt test:///) and SQLite:
the guests the hypervisor runs against the instances the scheduler counts on the host."""

from __future__ import annotations

import datetime as dt
import logging
import uuid as uuid_module
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from compute.periodic import PeriodicContext
from compute.periodic.scheduler_sync import sync_scheduler_instance_info
from compute.sessions import sessions_for
from models import Instance
from models.db import session_scope
from tests.factories import make_compute_node, make_instance, make_migration, make_settings
from virt.driver import GuestSpec
from virt.host_profile import default_profiles
from virt.simulated import SimulatedHostDriver

LAUNCHED = dt.datetime(2024, 1, 1)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[SimulatedHostDriver]:
    profile = default_profiles(1)[0]
    driver = SimulatedHostDriver(profile, tmp_path / "host1", instances_path=tmp_path / "disks")
    driver.init_host(profile.name)
    yield driver
    driver.close()


def _ctx(db_url: str, driver: SimulatedHostDriver) -> PeriodicContext:
    return PeriodicContext(
        sessions=sessions_for(db_url), settings=make_settings(), host="host1", driver=driver
    )


def _guest(driver: SimulatedHostDriver, uuid: str | None = None) -> str:
    uuid = uuid or str(uuid_module.uuid4())
    driver.spawn(
        GuestSpec(uuid=uuid, name=f"instance-{uuid[:8]}", vcpus=1, memory_mb=256, root_gb=1)
    )
    return uuid


def _instance(db_url: str, **values: Any) -> str:
    defaults: dict[str, Any] = dict(
        vm_state="active", task_state=None, host="host1", node="host1", launched_at=LAUNCHED
    )
    return make_instance(db_url, **{**defaults, **values})


def _states(db_url: str) -> dict[str, tuple[str, str | None, str | None, int]]:
    with session_scope(db_url) as session:
        return {
            i.uuid: (i.vm_state, i.task_state, i.host, i.deleted)
            for i in session.scalars(select(Instance))
        }


def test_a_host_whose_guests_match_its_instances_reports_a_match(
    db_url: str, host: SimulatedHostDriver
) -> None:
    make_compute_node(db_url)
    running = _guest(host, _instance(db_url))
    stopped = _guest(host, _instance(db_url, vm_state="stopped"))
    host.power_off(stopped)

    result = sync_scheduler_instance_info(_ctx(db_url, host))

    assert result["matched"] is True
    assert (result["guests"], result["instances"]) == (2, 2)
    assert result["missing_guests"] == [] and result["unknown_guests"] == []
    assert sorted(host.list_instance_uuids()) == sorted([running, stopped])


def test_a_guest_with_no_row_and_a_row_whose_guest_was_destroyed_are_reported(
    db_url: str, host: SimulatedHostDriver, caplog: pytest.LogCaptureFixture
) -> None:
    make_compute_node(db_url)
    matched = _guest(host, _instance(db_url))
    destroyed = _guest(host, _instance(db_url))
    host.destroy(destroyed)  # behind novaq's back
    stranger = _guest(host)  # a guest no row knows
    deleted = _guest(host, _instance(db_url, vm_state="deleted", deleted=1))
    elsewhere = _guest(host, _instance(db_url, host="host2", node="host2"))
    before = _states(db_url)

    with caplog.at_level(logging.WARNING, logger="compute.periodic.scheduler_sync"):
        result = sync_scheduler_instance_info(_ctx(db_url, host))

    assert result["matched"] is False
    assert result["missing_guests"] == [destroyed]
    assert result["unknown_guests"] == sorted([stranger, deleted, elsewhere])
    assert result["unknown_reasons"] == {
        stranger: "no instance with this uuid",
        deleted: "the instance is deleted",
        elsewhere: "the instance is on host host2",
    }
    assert matched not in result["missing_guests"] + result["unknown_guests"]
    [record] = caplog.records
    assert "The instance sync for host 'host1' did not match" in record.getMessage()
    for uuid in (destroyed, stranger, deleted, elsewhere):
        assert uuid in record.getMessage()
    # It only reports: no row and no guest changed.
    assert _states(db_url) == before
    assert sorted(host.list_instance_uuids()) == sorted([matched, stranger, deleted, elsewhere])


@pytest.mark.parametrize(
    ("vm_state", "task_state", "host_name"),
    [
        ("building", "spawning", "host1"),
        ("building", "scheduling", "host1"),
        ("shelved_offloaded", None, None),
        ("soft-delete", None, "host1"),
        ("active", "rebooting_hard", "host1"),
        ("stopped", "resize_migrating", "host1"),
        ("error", None, "host1"),  # a build that timed out: never launched
    ],
)
def test_rows_that_legitimately_have_no_guest_are_not_reported(
    db_url: str, host: SimulatedHostDriver, vm_state: str, task_state: str | None, host_name: str
) -> None:
    make_compute_node(db_url)
    launched = None if vm_state in ("building", "error") else LAUNCHED
    _instance(
        db_url, vm_state=vm_state, task_state=task_state, host=host_name, launched_at=launched
    )

    result = sync_scheduler_instance_info(_ctx(db_url, host))

    assert result["matched"] is True and result["guests"] == 0


def test_the_source_guest_of_a_move_in_flight_is_not_reported(
    db_url: str, host: SimulatedHostDriver
) -> None:
    make_compute_node(db_url)
    # A resize from host1 to host2 waiting for confirmation: the instance is on host2,
    # its old guest stays (powered off) on host1 until confirm or revert.
    uuid = _guest(host, _instance(db_url, vm_state="resized", host="host2", node="host2"))
    host.power_off(uuid)
    make_migration(db_url, uuid, status="finished", source_compute="host1", dest_compute="host2")

    result = sync_scheduler_instance_info(_ctx(db_url, host))

    assert result["matched"] is True and result["unknown_guests"] == []
