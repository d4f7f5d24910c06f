"""SimulatedHostDriver: guests that outlive a restart of the worker process.

A restart is simulated by closing one driver and constructing another on the
same ``state_dir``: each opens its own ``test:///<state_dir>/node.xml``, a
separate in-memory hypervisor, so only what was persisted can come back.
"""

from __future__ import annotations

import inspect
import json
import math
import random
import threading
import uuid as uuid_module
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import virt
from novaq.exceptions import ConfigError, HypervisorError, InvalidInput
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec
from virt.host_profile import HostProfile
from virt.libvirt.guest import Guest
from virt.simulated import CHAOS_SPAWN_FAILURE, SimulatedHostDriver

RUNNING, PAUSED, SHUTDOWN = power_state.RUNNING, power_state.PAUSED, power_state.SHUTDOWN

MakeHost = Callable[..., SimulatedHostDriver]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "hosts" / "host1"


@pytest.fixture
def make_host(tmp_path: Path, state_dir: Path, gpu_profile: HostProfile) -> Iterator[MakeHost]:
    """Build a SimulatedHostDriver on ``state_dir`` (by default); all closed at teardown."""
    hosts: list[SimulatedHostDriver] = []

    def make(profile: HostProfile = gpu_profile, **kwargs: Any) -> SimulatedHostDriver:
        kwargs.setdefault("instances_path", tmp_path / "instances")
        host = SimulatedHostDriver(profile, kwargs.pop("state_dir", state_dir), **kwargs)
        host.init_host(profile.name)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()


@pytest.fixture
def host(make_host: MakeHost) -> SimulatedHostDriver:
    return make_host()


def restart(host: SimulatedHostDriver, make_host: MakeHost) -> SimulatedHostDriver:
    """What a SIGKILLed and restarted worker sees: a new hypervisor on the same state_dir."""
    host.close()
    return make_host(host.profile, state_dir=host.state_dir)


def spec_number(n: int, **overrides: Any) -> GuestSpec:
    uuid = str(uuid_module.uuid5(uuid_module.NAMESPACE_URL, f"novaq-test-guest-{n}"))
    fields: dict[str, Any] = {"name": f"guest{n}", "vcpus": 1, "memory_mb": 512, "root_gb": 1}
    return GuestSpec(uuid=uuid, **(fields | overrides))


def _state(driver: ComputeDriver, uuid: str) -> int:
    return driver.get_info(uuid).power_state


# -- the contract -----------------------------------------------------------


def test_every_compute_driver_method_is_implemented() -> None:
    protocol = {name for name, _ in inspect.getmembers(ComputeDriver, inspect.isfunction)}
    protocol -= {name for name in protocol if name.startswith("_")}

    missing = {name for name in protocol if not callable(getattr(SimulatedHostDriver, name, None))}

    assert protocol and not missing


def test_resources_read_back_the_profile_and_the_node_is_named_after_it(
    host: SimulatedHostDriver,
) -> None:
    resources = host.get_available_resource()

    assert (resources.vcpus, resources.memory_mb, resources.local_gb) == (16, 32768, 500)
    assert [d.address for d in resources.pci_devices] == ["0000:08:00.0", "0000:88:00.0"]
    assert resources.hypervisor_hostname == "host1"
    assert host.get_available_nodes() == ["host1"]
    assert host.uri == "test://" + str((host.state_dir / "node.xml").absolute())


def test_resources_are_the_same_after_a_restart(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    before = host.get_available_resource()

    assert restart(host, make_host).get_available_resource() == before


# -- guests survive a restart ------------------------------------------------

# (operations after spawn, power state after a restart)
LIFECYCLES = {
    "running": ((), RUNNING),
    "paused": (("pause",), PAUSED),
    "stopped": (("power_off",), SHUTDOWN),
    "suspended": (("suspend",), SHUTDOWN),
    "resumed": (("suspend", "resume"), RUNNING),
    "unpaused": (("pause", "unpause"), RUNNING),
    "restarted": (("power_off", "power_on"), RUNNING),
}


@pytest.mark.parametrize("lifecycle", LIFECYCLES, ids=list(LIFECYCLES))
def test_guests_come_back_in_the_power_state_they_had(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec, lifecycle: str
) -> None:
    operations, expected = LIFECYCLES[lifecycle]
    host.spawn(plain_spec)
    for operation in operations:
        getattr(host, operation)(plain_spec.uuid)

    after = restart(host, make_host)

    assert after.list_instance_uuids() == [plain_spec.uuid]
    assert _state(after, plain_spec.uuid) == expected


def test_a_suspended_guest_comes_back_with_its_saved_memory(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    host.suspend(plain_spec.uuid)

    after = restart(host, make_host)
    after.suspend(plain_spec.uuid)  # a no-op only on a suspended guest
    after.resume(plain_spec.uuid)

    assert _state(after, plain_spec.uuid) == RUNNING


def test_a_stopped_guest_comes_back_without_saved_memory(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    host.power_off(plain_spec.uuid)

    after = restart(host, make_host)

    with pytest.raises(HypervisorError, match="cannot resume"):
        after.resume(plain_spec.uuid)


def test_guests_survive_several_restarts_and_changes_in_between(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec, gpu_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    second = restart(host, make_host)
    second.pause(plain_spec.uuid)
    second.spawn(gpu_spec)

    third = restart(second, make_host)

    assert third.list_instance_uuids() == sorted([plain_spec.uuid, gpu_spec.uuid])
    assert (_state(third, plain_spec.uuid), _state(third, gpu_spec.uuid)) == (PAUSED, RUNNING)


def test_a_guest_with_pci_hostdevs_comes_back_with_them(
    host: SimulatedHostDriver, make_host: MakeHost, gpu_spec: GuestSpec
) -> None:
    host.spawn(gpu_spec)

    info = restart(host, make_host).get_info(gpu_spec.uuid)

    assert info.pci_addresses == ("0000:08:00.0", "0000:88:00.0")
    assert (info.name, info.vcpus, info.memory_mb) == ("gpu", 4, 8192)


def test_a_hard_reboot_of_a_suspended_guest_is_persisted_as_running(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    host.suspend(plain_spec.uuid)
    host.reboot(plain_spec, hard=True)

    assert _state(restart(host, make_host), plain_spec.uuid) == RUNNING


def test_destroyed_guests_do_not_come_back(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec, gpu_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    host.spawn(gpu_spec)
    host.destroy(plain_spec.uuid)

    assert restart(host, make_host).list_instance_uuids() == [gpu_spec.uuid]


def test_a_new_host_starts_empty(host: SimulatedHostDriver) -> None:
    assert host.list_instance_uuids() == []
    assert (host.state_dir / "node.xml").is_file()


# -- the persisted records ---------------------------------------------------


def test_records_are_json_and_follow_the_guest(
    host: SimulatedHostDriver, plain_spec: GuestSpec
) -> None:
    path = host.state_dir / "domains" / f"{plain_spec.uuid}.json"
    host.spawn(plain_spec)
    host.suspend(plain_spec.uuid)

    record = json.loads(path.read_text(encoding="utf-8"))

    assert record["uuid"] == plain_spec.uuid
    assert (record["power_state"], record["managed_save"]) == (SHUTDOWN, True)
    assert record["xml"] == host.get_info(plain_spec.uuid).xml
    assert "<hostdev" not in record["xml"]


def test_records_are_removed_on_destroy_and_leave_no_temp_files(
    host: SimulatedHostDriver, plain_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    host.pause(plain_spec.uuid)

    host.destroy(plain_spec.uuid)
    host.destroy(plain_spec.uuid)

    assert list((host.state_dir / "domains").iterdir()) == []


def test_a_destroy_that_fails_half_way_persists_the_stopped_guest_it_left(
    host: SimulatedHostDriver,
    make_host: MakeHost,
    plain_spec: GuestSpec,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plug pulled, the undefine refused (the hypervisor's failure, injected): the
    guest is still there, shut off, and so is its record (a restart brings it back off)."""
    host.spawn(plain_spec)

    def refuse(guest: Guest) -> None:
        raise HypervisorError(reason="undefine refused")

    monkeypatch.setattr(Guest, "delete_configuration", refuse)
    with pytest.raises(HypervisorError, match="undefine refused"):
        host.destroy(plain_spec.uuid)
    monkeypatch.undo()

    record = json.loads(host.record_path(plain_spec.uuid).read_text(encoding="utf-8"))
    assert record["power_state"] == SHUTDOWN
    assert _state(restart(host, make_host), plain_spec.uuid) == SHUTDOWN


def test_a_refused_operation_leaves_the_record_as_it_was(
    host: SimulatedHostDriver, plain_spec: GuestSpec
) -> None:
    path = host.record_path(plain_spec.uuid)
    host.spawn(plain_spec)
    host.power_off(plain_spec.uuid)
    before = path.read_text(encoding="utf-8")

    with pytest.raises(HypervisorError, match="cannot pause"):
        host.pause(plain_spec.uuid)

    assert path.read_text(encoding="utf-8") == before


def test_an_unreadable_record_is_skipped_and_the_other_guests_come_back(
    host: SimulatedHostDriver, make_host: MakeHost, plain_spec: GuestSpec
) -> None:
    host.spawn(plain_spec)
    (host.state_dir / "domains" / "broken.json").write_text("{not json", encoding="utf-8")
    (host.state_dir / "domains" / "odd.json").write_text('{"xml": 1}', encoding="utf-8")

    assert restart(host, make_host).list_instance_uuids() == [plain_spec.uuid]


def test_operations_on_unknown_or_malformed_uuids_write_nothing(
    host: SimulatedHostDriver,
) -> None:
    host.destroy(str(uuid_module.uuid4()))
    with pytest.raises(HypervisorError, match="Invalid UUID"):
        host.destroy("../../escape")

    assert list((host.state_dir / "domains").iterdir()) == []


def test_concurrent_spawns_persist_every_guest(
    host: SimulatedHostDriver, make_host: MakeHost
) -> None:
    specs = [spec_number(n) for n in range(8)]
    threads = [threading.Thread(target=host.spawn, args=(spec,)) for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    after = restart(host, make_host)

    assert after.list_instance_uuids() == sorted(spec.uuid for spec in specs)


# -- spawn failures ----------------------------------------------------------


def test_a_failure_rate_of_one_always_fails_and_defines_nothing(
    make_host: MakeHost, gpu_profile: HostProfile
) -> None:
    host = make_host(replace(gpu_profile, spawn_failure_rate=1.0))

    for n in range(5):
        with pytest.raises(HypervisorError, match=r"simulated spawn failure \(chaos\)"):
            host.spawn(spec_number(n))

    assert host.list_instance_uuids() == []
    assert list((host.state_dir / "domains").iterdir()) == []


def test_a_failure_rate_of_zero_never_fails(host: SimulatedHostDriver) -> None:
    specs = [spec_number(n) for n in range(20)]

    for spec in specs:
        host.spawn(spec)

    assert host.list_instance_uuids() == sorted(spec.uuid for spec in specs)


def _spawn_outcomes(host: SimulatedHostDriver, count: int) -> list[bool]:
    outcomes = []
    for n in range(count):
        try:
            host.spawn(spec_number(n))
            outcomes.append(True)
        except HypervisorError as exc:
            assert CHAOS_SPAWN_FAILURE in str(exc)
            outcomes.append(False)
    return outcomes


def test_a_seeded_rng_gives_a_deterministic_pattern(
    make_host: MakeHost, gpu_profile: HostProfile, tmp_path: Path
) -> None:
    profile = replace(gpu_profile, spawn_failure_rate=0.5)
    first = make_host(profile, state_dir=tmp_path / "a", rng=random.Random(7))
    second = make_host(profile, state_dir=tmp_path / "b", rng=random.Random(7))
    draws = random.Random(7)

    pattern = _spawn_outcomes(first, 16)

    assert pattern == [draws.random() >= 0.5 for _ in range(16)]
    assert _spawn_outcomes(second, 16) == pattern
    assert True in pattern and False in pattern
    assert len(first.list_instance_uuids()) == pattern.count(True)


def test_chaos_never_fails_a_redelivered_spawn_of_an_existing_guest(
    make_host: MakeHost, gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    make_host().spawn(plain_spec)
    always_failing = replace(gpu_profile, spawn_failure_rate=1.0)

    host = make_host(always_failing)

    assert host.spawn(plain_spec).power_state == RUNNING


def test_fail_spawn_still_always_fails(
    make_host: MakeHost, gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    host = make_host(replace(gpu_profile, fail_spawn=True))

    with pytest.raises(HypervisorError, match="refuses to start guests"):
        host.spawn(plain_spec)

    assert host.list_instance_uuids() == []
    assert host.fail_spawn


@pytest.mark.parametrize("rate", [-0.1, 1.01, math.nan, math.inf, True, "0.5", None])
def test_host_profile_rejects_a_failure_rate_outside_zero_to_one(rate: Any) -> None:
    with pytest.raises(InvalidInput, match="spawn_failure_rate must be a number from 0 to 1"):
        HostProfile("host1", spawn_failure_rate=rate)


@pytest.mark.parametrize("rate", [0, 0.0, 0.25, 1, 1.0])
def test_host_profile_accepts_a_failure_rate_from_zero_to_one(rate: float) -> None:
    assert HostProfile("host1", spawn_failure_rate=rate).spawn_failure_rate == rate


# -- the per-process cache ---------------------------------------------------


@pytest.fixture
def forget_drivers() -> Iterator[None]:
    # Before too: an earlier test in this process (pytest-xdist mixes the order) may have
    # left its own host1 in the cache, with other options.
    virt.clear_drivers()
    yield
    virt.clear_drivers()


@pytest.mark.usefixtures("forget_drivers")
def test_get_simulated_driver_gives_one_driver_per_host(
    gpu_profile: HostProfile, state_dir: Path, tmp_path: Path
) -> None:
    first = virt.get_simulated_driver(gpu_profile, state_dir)
    other = virt.get_simulated_driver(HostProfile("host2"), tmp_path / "hosts" / "host2")

    assert virt.get_simulated_driver(gpu_profile, state_dir) is first
    assert other is not first
    assert isinstance(first, SimulatedHostDriver)


@pytest.mark.usefixtures("forget_drivers")
def test_get_simulated_driver_refuses_other_options_for_the_same_host(
    gpu_profile: HostProfile, state_dir: Path, tmp_path: Path
) -> None:
    virt.get_simulated_driver(gpu_profile, state_dir)

    with pytest.raises(ConfigError, match="already exists with other options"):
        virt.get_simulated_driver(replace(gpu_profile, vcpus=8), state_dir)
    with pytest.raises(ConfigError, match="already exists with other options"):
        virt.get_simulated_driver(gpu_profile, tmp_path / "elsewhere")


@pytest.mark.usefixtures("forget_drivers")
def test_clear_drivers_forgets_simulated_hosts_whose_guests_come_back(
    gpu_profile: HostProfile, state_dir: Path, plain_spec: GuestSpec
) -> None:
    first = virt.get_simulated_driver(gpu_profile, state_dir)
    first.spawn(plain_spec)

    virt.clear_drivers()
    second = virt.get_simulated_driver(gpu_profile, state_dir)

    assert second is not first
    assert second.list_instance_uuids() == [plain_spec.uuid]
