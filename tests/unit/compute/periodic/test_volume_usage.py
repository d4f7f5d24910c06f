"""``_poll_volume_usage``: each guest disk's I/O counters from the hypervisor into
``volume_usage_cache`` with Nova's curr/tot semantics, and a ``volume.usage`` per disk.
Real SQLite rows and a simulated ``test:///`` host (libvirt's test driver returns
counters that grow with time); exact arithmetic on the in-memory FakeDriver."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from compute.build import guest_spec
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from compute.periodic.volume_usage import poll_volume_usage
from compute.sessions import sessions_for
from models import VolumeUsage, utcnow
from models.db import session_scope
from novaq.exceptions import DomainNotFound
from tests.factories import flavor_dict, host_resources, make_instance, make_settings
from tests.unit.compute.conftest import Sent
from virt.driver import ComputeDriver
from virt.fake import FakeDriver
from virt.simulated import SimulatedHostDriver

FLAVOR = flavor_dict(ephemeral_gb=1, swap=64)  # three disks: vda, vdb, vdc


def _ctx(db_url: str, driver: ComputeDriver) -> PeriodicContext:
    return PeriodicContext(
        sessions_for(db_url), make_settings(volume_usage_poll_interval=60), "host1", driver
    )


def _server(db_url: str, driver: ComputeDriver | None, **values: Any) -> str:
    """An ACTIVE instance on host1 (unless ``values`` say otherwise) with its guest."""
    state = dict(host="host1", node="host1", vm_state="active", task_state=None)
    uuid = make_instance(db_url, FLAVOR, launched_at=utcnow(), **{**state, **values})
    if driver is not None:
        with session_scope(db_url) as session:
            driver.spawn(guest_spec(session, get_instance(session, uuid)))
    return uuid


def _rows(db_url: str) -> dict[str, VolumeUsage]:
    with session_scope(db_url) as session:
        rows = {r.volume_id: r for r in session.scalars(select(VolumeUsage))}
        session.expunge_all()
        return rows


def _usage_payloads(sent: Sent) -> dict[str, dict[str, Any]]:
    assert {m["event_type"] for m, _ in sent} <= {"volume.usage"}
    return {
        m["payload"]["nova_object.data"]["volume_id"]: m["payload"]["nova_object.data"]
        for m, _ in sent
    }


# -- the driver ---------------------------------------------------------------------


def test_the_test_driver_reports_counters_per_disk_of_a_running_guest(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    uuid = _server(db_url, hypervisor)

    stats = hypervisor.block_stats(uuid)

    assert sorted(stats) == ["vda", "vdb", "vdc"]
    for counters in stats.values():
        assert sorted(counters) == ["rd_bytes", "rd_req", "wr_bytes", "wr_req"]
        assert all(isinstance(v, int) and v > 0 for v in counters.values())


def test_a_stopped_guest_has_no_counters_and_an_unknown_one_is_not_found(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    uuid = _server(db_url, hypervisor)
    hypervisor.power_off(uuid)

    assert hypervisor.block_stats(uuid) == {}
    with pytest.raises(DomainNotFound):
        hypervisor.block_stats("6c4ab0a2-8ad5-4bd5-9d9c-1b0b8b0b3f11")


# -- the poll -----------------------------------------------------------------------


def test_each_disk_of_each_guest_gets_a_row_and_a_notification(
    db_url: str, hypervisor: SimulatedHostDriver, sent: Sent
) -> None:
    uuid = _server(db_url, hypervisor)

    result = poll_volume_usage(_ctx(db_url, hypervisor))

    volumes = [f"{uuid}/{dev}" for dev in ("vda", "vdb", "vdc")]
    assert result == {"instances": [uuid], "disks": 3, "reset": []}
    rows = _rows(db_url)
    assert sorted(rows) == volumes
    row = rows[volumes[0]]
    assert (row.instance_uuid, row.host) == (uuid, "host1")
    assert row.curr_reads > 0 and row.curr_write_bytes > 0 and row.curr_last_refreshed
    assert (row.tot_reads, row.tot_write_bytes, row.tot_last_refreshed) == (0, 0, None)
    payloads = _usage_payloads(sent)
    assert sorted(payloads) == volumes
    data = payloads[volumes[0]]
    assert (data["instance_uuid"], data["reads"], data["write_bytes"]) == (
        uuid,
        row.curr_reads,
        row.curr_write_bytes,
    )
    assert sent[0][0]["publisher_id"] == "nova-compute:host1"


def test_rising_counters_replace_the_current_ones(
    db_url: str, hypervisor: SimulatedHostDriver, sent: Sent
) -> None:
    uuid = _server(db_url, hypervisor)
    poll_volume_usage(_ctx(db_url, hypervisor))
    first = _rows(db_url)[f"{uuid}/vda"]

    assert poll_volume_usage(_ctx(db_url, hypervisor))["reset"] == []

    second = _rows(db_url)[f"{uuid}/vda"]
    assert second.curr_reads >= first.curr_reads and second.tot_reads == 0
    assert second.curr_last_refreshed > first.curr_last_refreshed


def test_counters_lower_than_the_cached_ones_fold_the_cached_ones_into_the_totals(
    db_url: str, hypervisor: SimulatedHostDriver, sent: Sent
) -> None:
    uuid = _server(db_url, hypervisor)
    volume = f"{uuid}/vda"
    before_restart = 10**18  # above anything the test driver reports: the guest restarted
    with session_scope(db_url) as session:
        session.add(
            VolumeUsage(
                volume_id=volume,
                instance_uuid=uuid,
                host="host1",
                tot_reads=5,
                curr_reads=before_restart,
                curr_read_bytes=before_restart,
            )
        )

    result = poll_volume_usage(_ctx(db_url, hypervisor))

    assert result["reset"] == [volume]
    row = _rows(db_url)[volume]
    assert row.tot_reads == 5 + before_restart and row.tot_read_bytes == before_restart
    assert 0 < row.curr_reads < before_restart
    assert _usage_payloads(sent)[volume]["reads"] == row.tot_reads + row.curr_reads


def test_a_guest_restart_keeps_the_usage_so_far(db_url: str, sent: Sent) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver)
    driver.block_counters[uuid] = {"vda": {"rd_req": 100, "rd_bytes": 4096}}
    poll_volume_usage(_ctx(db_url, driver))
    driver.block_counters[uuid] = {"vda": {"rd_req": 40, "rd_bytes": 1024}}  # restarted
    sent.clear()

    poll_volume_usage(_ctx(db_url, driver))

    row = _rows(db_url)[f"{uuid}/vda"]
    assert (row.tot_reads, row.tot_read_bytes, row.curr_reads, row.curr_read_bytes) == (
        100,
        4096,
        40,
        1024,
    )
    data = _usage_payloads(sent)[f"{uuid}/vda"]
    assert (data["reads"], data["read_bytes"], data["writes"]) == (140, 5120, 0)
    assert (data["project_id"], data["user_id"]) == ("demo", "demo")  # the server's owner


def test_stopped_missing_deleted_and_foreign_guests_are_not_polled(
    db_url: str, hypervisor: SimulatedHostDriver, sent: Sent
) -> None:
    stopped = _server(db_url, hypervisor, vm_state="stopped")
    hypervisor.power_off(stopped)
    _server(db_url, None)  # the hypervisor has no guest for it
    _server(db_url, hypervisor, deleted=1, vm_state="deleted")
    _server(db_url, hypervisor, host="host2")

    result = poll_volume_usage(_ctx(db_url, hypervisor))

    assert result == {"instances": [], "disks": 0, "reset": []}
    assert _rows(db_url) == {} and sent == []
