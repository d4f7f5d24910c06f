"""One real guest through its whole life on a ``novaq up`` cluster of two qemu:///system
hosts, through ``workflows.api``: boot, stop/start, soft reboot, pause, suspend, rescue,
resize (revert, then confirm), cold migrate, delete. After each step ``api.show`` must equal
what libvirt says (state, vCPUs, memory, disk files) and what the guest printed (boot id,
CPUs, memory, disk size, and the counter it keeps on its disk).

The tests run in file order and share one server: each starts where the previous one left
it (a failure early makes the later ones fail too; read the first)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import libvirt
import pytest
from sqlalchemy import select

from tests.hypervisor.checks import Layout, agree, guest_matches_flavor, overlay_of_base
from tests.hypervisor.conftest import HOSTS, SOFT_REBOOT_WAIT_S, RealCluster
from tests.hypervisor.guest import (
    Boot,
    ConsoleRecorder,
    boots,
    domain_state,
    read_text,
    shut_down_between,
    wait_new_boot,
    wait_shutdown_line,
    wait_tick_after,
    wait_until,
)

pytestmark = pytest.mark.hypervisor

WAIT_S = 180  # one operation, TCG guests included
#: What Linux prints for an NMI no handler claims (arch/x86/kernel/nmi.c).
NMI = "NMI received for unknown reason"


@dataclass
class Server:
    """The scenario's server as the tests last saw it."""

    uuid: str
    image_id: str
    layout: Layout
    host: str = ""
    last: Boot | None = None
    seen: set[str] = field(default_factory=set)
    hosts_used: set[str] = field(default_factory=set)

    def console(self) -> str:
        return read_text(self.layout.console_log(self.host, self.uuid))

    def recording(self) -> ConsoleRecorder:
        return ConsoleRecorder(lambda: self.layout.console_log(self.host, self.uuid))

    def booted(self, view: dict[str, Any], timeout_s: float = 90) -> Boot:
        """Wait for a boot not seen before on the console of the host novaq names; check it
        shows the flavor novaq reports."""
        self.host = view["host"]
        self.hosts_used.add(self.host)
        boot = wait_new_boot(self.console, self.seen, timeout_s)
        self.seen.add(boot.boot_id)
        guest_matches_flavor(boot, view["flavor"])
        self.last = boot
        return boot

    @property
    def counter(self) -> int:
        assert self.last is not None
        return self.last.counter


@pytest.fixture(scope="module")
def server(
    cluster: RealCluster, image: dict[str, Any], flavors: dict[str, Any], layout: Layout
) -> Server:
    from workflows import api

    [uuid] = api.boot("hv-guest", flavors["small"]["name"], image["name"])
    return Server(uuid, image["id"], layout)


def _wait(uuid: str, status: str, through: tuple[str, ...] = ()) -> dict[str, Any]:
    """The server once its operation is over: no task state (the API sets one at once) and
    no longer in a ``through`` status (confirming a resize sets none: VERIFY_RESIZE until
    the source is cleaned). It must be in ``status``; else fail with its fault and last
    action."""
    from workflows import api

    def settled() -> dict[str, Any] | None:
        view = api.show(uuid)
        done = view["task_state"] is None and view["status"] not in through
        return view if done else None

    view = wait_until(f"{uuid} settling in {status}", settled, WAIT_S)
    if view["status"] != status:
        last = api.list_actions(uuid)[-1]
        raise AssertionError(f"{status} wanted, {view['status']}: {view['fault']}; {last}")
    return view


def test_boot_runs_the_guest_with_the_flavor_on_a_qcow2_overlay_of_the_cached_base(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout, flavors: dict[str, Any]
) -> None:
    from workflows import api

    view = _wait(server.uuid, "ACTIVE")
    assert view["host"] in HOSTS and view["flavor"]["name"] == flavors["small"]["name"]
    boot = server.booted(view)
    assert boot.counter == 1  # a fresh disk
    agree(libvirt_ro, layout, view)
    overlay_of_base(layout, server.host, server.uuid, server.image_id, root_gb=1)
    log = api.console_log(server.uuid)
    assert f"NOVAQ-GUEST boot_id={boot.boot_id} cpus={view['flavor']['vcpus']}" in log
    last = api.console_log(server.uuid, length=1)
    assert last.count("\n") <= 1 and last.strip() in api.console_log(server.uuid)


def test_stop_is_a_clean_shutdown_and_start_boots_the_same_disk_again(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout
) -> None:
    from workflows import api

    before = server.last
    assert before is not None
    api.stop(server.uuid)
    agree(libvirt_ro, layout, _wait(server.uuid, "SHUTOFF"))
    wait_shutdown_line(server.console, before.boot_id, timeout_s=10)

    api.start(server.uuid)
    view = _wait(server.uuid, "ACTIVE")
    boot = server.booted(view)
    assert boot.boot_id != before.boot_id and boot.counter == before.counter + 1
    agree(libvirt_ro, layout, view)


def test_soft_reboot_shuts_down_cleanly_and_boots_again(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout
) -> None:
    from workflows import api

    before = server.last
    assert before is not None
    started = time.monotonic()
    with server.recording() as console:
        api.reboot(server.uuid)
        view = _wait(server.uuid, "ACTIVE")
        boot = server.booted(view)
    assert boot.counter == before.counter + 1
    # Soft: an ACPI shutdown seen on the console, then a start; not the hard fallback that
    # follows wait_soft_reboot_seconds when the guest does not go down.
    assert shut_down_between(console.text(), before.boot_id, boot.boot_id), console.text()
    assert time.monotonic() - started < SOFT_REBOOT_WAIT_S
    agree(libvirt_ro, layout, view)


@pytest.mark.parametrize(
    ("action", "undo", "status"),
    [("pause", "unpause", "PAUSED"), ("suspend", "resume", "SUSPENDED")],
)
def test_pause_and_suspend_keep_the_running_guest_and_match_libvirt(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout, action: str, undo: str,
    status: str,
) -> None:  # fmt: skip
    from workflows import api

    before = server.last
    assert before is not None
    running_s = wait_tick_after(server.console, before.boot_id, 0)
    getattr(api, action)(server.uuid)
    agree(libvirt_ro, layout, _wait(server.uuid, status))
    getattr(api, undo)(server.uuid)
    agree(libvirt_ro, layout, _wait(server.uuid, "ACTIVE"))
    # The same boot goes on (its memory kept): it ticks on, never shut down, never rebooted.
    wait_tick_after(server.console, before.boot_id, running_s)
    found = boots(server.console())
    assert all(b.boot_id == before.boot_id and not b.shut_down for b in found), found


def test_trigger_crash_dump_is_an_nmi_the_running_guest_reports_and_survives(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout
) -> None:
    from workflows import api

    before = server.last
    assert before is not None
    running_s = wait_tick_after(server.console, before.boot_id, 0)
    request_id = api.trigger_crash_dump(server.uuid)
    # The guest's kernel reports the NMI on its serial console (nothing claims it: the
    # test guest configures no crash kernel), then goes on running.
    wait_until("the guest reporting the NMI", lambda: NMI in server.console() or None, WAIT_S)
    view = _wait(server.uuid, "ACTIVE")
    [action] = [a for a in api.list_actions(server.uuid) if a["request_id"] == request_id]
    assert [(e["event"], e["result"]) for e in action["events"]] == [
        ("compute_trigger_crash_dump", "Success")
    ]
    wait_tick_after(server.console, before.boot_id, running_s)
    agree(libvirt_ro, layout, view)


def test_rescue_boots_the_image_with_the_root_disk_second_and_unrescue_restores_it(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout
) -> None:
    from workflows import api

    before = server.last
    assert before is not None
    api.rescue(server.uuid)
    view = _wait(server.uuid, "RESCUE")
    assert view["power_state"] == 1
    agree(libvirt_ro, layout, view)  # rescue disk first, the original root second
    rescue_boot = wait_new_boot(server.console, server.seen)
    server.seen.add(rescue_boot.boot_id)
    assert rescue_boot.counter == 1  # a fresh overlay of the image, not the root disk

    api.unrescue(server.uuid)
    view = _wait(server.uuid, "ACTIVE")
    boot = server.booted(view)
    assert boot.counter == before.counter + 1  # the original disk, untouched by rescue
    agree(libvirt_ro, layout, view)


def test_resize_up_shows_more_cpus_memory_and_disk_and_revert_restores_the_original(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout, flavors: dict[str, Any]
) -> None:
    from workflows import api

    source, before = server.host, server.last
    assert before is not None
    api.resize(server.uuid, flavors["big"]["name"])
    view = _wait(server.uuid, "VERIFY_RESIZE")
    assert view["host"] != source and view["flavor"]["name"] == flavors["big"]["name"]
    boot = server.booted(view)  # one CPU more, 384 MB, a 2 GiB disk (checked by booted)
    assert boot.counter == before.counter + 1  # the disk came along
    agree(libvirt_ro, layout, view)
    overlay_of_base(layout, server.host, server.uuid, server.image_id, root_gb=2)
    assert layout.leftovers(source, server.uuid), "the source's files are kept until confirm"

    dest = server.host
    api.revert_resize(server.uuid)
    view = _wait(server.uuid, "ACTIVE")
    assert view["host"] == source and view["flavor"]["name"] == flavors["small"]["name"]
    boot = server.booted(view)  # the small flavor's CPUs, 256 MB, 1 GiB again
    # The source's own disk, as it was before the resize: the destination's boot is gone.
    assert boot.counter == before.counter + 1
    agree(libvirt_ro, layout, view)
    assert layout.leftovers(dest, server.uuid) == []


def test_resize_up_and_confirm_keeps_the_bigger_guest_and_removes_the_source_files(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout, flavors: dict[str, Any]
) -> None:
    from workflows import api

    source, before = server.host, server.last
    assert before is not None
    api.resize(server.uuid, flavors["big"]["name"])
    view = _wait(server.uuid, "VERIFY_RESIZE")
    boot = server.booted(view)
    assert boot.counter == before.counter + 1
    api.confirm_resize(server.uuid)
    view = _wait(server.uuid, "ACTIVE", through=("VERIFY_RESIZE",))
    assert view["host"] != source and view["flavor"]["name"] == flavors["big"]["name"]
    agree(libvirt_ro, layout, view)
    assert layout.leftovers(source, server.uuid) == []
    assert [b.boot_id for b in boots(server.console())][-1] == boot.boot_id  # still that boot


def test_cold_migrate_moves_the_disk_to_the_other_host_and_confirm_cleans_the_source(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout
) -> None:
    from workflows import api

    source, before = server.host, server.last
    assert before is not None
    api.migrate(server.uuid)
    view = _wait(server.uuid, "VERIFY_RESIZE")
    assert view["host"] != source
    boot = server.booted(view)  # the same flavor: cpus=3, 2 GiB
    assert boot.counter == before.counter + 1
    assert layout.leftovers(source, server.uuid), "the source's files are kept until confirm"
    api.confirm_resize(server.uuid)
    view = _wait(server.uuid, "ACTIVE", through=("VERIFY_RESIZE",))
    agree(libvirt_ro, layout, view)
    assert layout.leftovers(source, server.uuid) == []
    overlay_of_base(layout, server.host, server.uuid, server.image_id, root_gb=2)


def test_delete_removes_domain_files_and_allocations_and_keeps_the_base(
    server: Server, libvirt_ro: libvirt.virConnect, layout: Layout
) -> None:
    from workflows import api

    migrations = [m["uuid"] for m in api.list_migrations(instance_uuid=server.uuid)]
    api.delete(server.uuid)
    api.wait(server.uuid, "DELETED", timeout=WAIT_S)
    assert domain_state(libvirt_ro, server.uuid) == "absent"
    for host in HOSTS:
        assert layout.leftovers(host, server.uuid) == [], host
    assert _allocations({server.uuid, *migrations}) == []
    assert api.audit()["leaks"] == 0
    for host in server.hosts_used:
        assert layout.base(host, server.image_id).is_file(), "bases outlive their instances"


def _allocations(consumers: set[str]) -> list[Any]:
    from models import Allocation
    from models.db import session_scope
    from workflows.api.common import db_url

    with session_scope(db_url()) as session:
        rows = session.scalars(select(Allocation).where(Allocation.consumer_uuid.in_(consumers)))
        return [repr(row) for row in rows]
