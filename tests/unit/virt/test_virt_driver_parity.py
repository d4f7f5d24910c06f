"""The same contract checked on FakeDriver and LibvirtDriver (test:///)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from novaq.exceptions import DomainNotFound, HypervisorError, InstanceNotRunning
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec, HostResources
from virt.fake import DestroyFailingDriver, FakeDriver, SpawnFailingDriver
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver

RUNNING, PAUSED, SHUTDOWN = power_state.RUNNING, power_state.PAUSED, power_state.SHUTDOWN


@pytest.fixture(params=["fake", "libvirt"])
def any_driver(
    request: pytest.FixtureRequest,
    make_driver: Callable[..., LibvirtDriver],
    gpu_profile: HostProfile,
    fake_resources: HostResources,
) -> ComputeDriver:
    if request.param == "fake":
        return FakeDriver(fake_resources)
    return make_driver(gpu_profile)


def _state(driver: ComputeDriver, uuid: str) -> int:
    return driver.get_info(uuid).power_state


def test_spawn_is_idempotent(any_driver: ComputeDriver, gpu_spec: GuestSpec) -> None:
    first = any_driver.spawn(gpu_spec)

    assert any_driver.spawn(gpu_spec).power_state == first.power_state == RUNNING
    assert any_driver.list_instance_uuids() == [gpu_spec.uuid]
    assert any_driver.instance_exists(gpu_spec.uuid)
    assert first.pci_addresses == gpu_spec.pci_addresses
    assert (first.vcpus, first.memory_mb, first.name) == (4, 8192, "gpu")


def test_destroy_is_idempotent(any_driver: ComputeDriver, plain_spec: GuestSpec) -> None:
    any_driver.spawn(plain_spec)

    any_driver.destroy(plain_spec.uuid)
    any_driver.destroy(plain_spec.uuid)

    assert not any_driver.instance_exists(plain_spec.uuid)
    with pytest.raises(DomainNotFound):
        any_driver.get_info(plain_spec.uuid)


# (operation, expected state after it), starting from a running guest.
SEQUENCE = [
    ("pause", PAUSED),
    ("pause", PAUSED),
    ("unpause", RUNNING),
    ("unpause", RUNNING),
    ("suspend", SHUTDOWN),
    ("suspend", SHUTDOWN),
    ("resume", RUNNING),
    ("resume", RUNNING),
    ("power_off", SHUTDOWN),
    ("power_off", SHUTDOWN),
    ("power_on", RUNNING),
    ("power_on", RUNNING),
    ("pause", PAUSED),
    ("power_on", RUNNING),
    ("pause", PAUSED),
    ("suspend", SHUTDOWN),
    ("power_on", RUNNING),
    ("power_off", SHUTDOWN),
    ("reboot_soft", RUNNING),
    ("reboot_hard", RUNNING),
    ("pause", PAUSED),
    ("reboot_hard", RUNNING),
]


def test_power_operations_move_the_power_state(
    any_driver: ComputeDriver, plain_spec: GuestSpec
) -> None:
    any_driver.spawn(plain_spec)
    seen = []
    for operation, _expected in SEQUENCE:
        if operation.startswith("reboot"):
            any_driver.reboot(plain_spec, hard=operation == "reboot_hard")
        else:
            getattr(any_driver, operation)(plain_spec.uuid)
        seen.append((operation, _state(any_driver, plain_spec.uuid)))

    assert seen == SEQUENCE


@pytest.mark.parametrize(
    ("setup", "operation"),
    [
        ("power_off", "pause"),
        ("power_off", "unpause"),
        ("power_off", "suspend"),
        ("power_off", "resume"),
        ("pause", "resume"),
    ],
)
def test_operations_refused_in_the_wrong_state(
    any_driver: ComputeDriver, plain_spec: GuestSpec, setup: str, operation: str
) -> None:
    any_driver.spawn(plain_spec)
    getattr(any_driver, setup)(plain_spec.uuid)
    before = _state(any_driver, plain_spec.uuid)

    with pytest.raises(HypervisorError, match=f"cannot {operation} guest"):
        getattr(any_driver, operation)(plain_spec.uuid)
    assert _state(any_driver, plain_spec.uuid) == before


def test_spawn_restarts_a_stopped_guest(any_driver: ComputeDriver, plain_spec: GuestSpec) -> None:
    any_driver.spawn(plain_spec)
    any_driver.power_off(plain_spec.uuid)

    assert any_driver.spawn(plain_spec).power_state == RUNNING


def test_spawn_failing_driver(fake_resources: HostResources, plain_spec: GuestSpec) -> None:
    driver = SpawnFailingDriver(fake_resources)

    with pytest.raises(HypervisorError, match="refuses to start guests"):
        driver.spawn(plain_spec)
    assert driver.list_instance_uuids() == []


def test_destroy_failing_driver_keeps_the_guest(
    fake_resources: HostResources, plain_spec: GuestSpec
) -> None:
    driver = DestroyFailingDriver(fake_resources)
    driver.spawn(plain_spec)

    with pytest.raises(HypervisorError, match="destroying guest"):
        driver.destroy(plain_spec.uuid)
    assert driver.get_info(plain_spec.uuid).power_state == RUNNING


def test_fake_driver_reports_its_resources(fake_resources: HostResources) -> None:
    driver = FakeDriver(fake_resources)
    driver.init_host("host1")

    assert driver.get_available_resource() == fake_resources
    assert driver.get_available_nodes() == ["fake-node"]
    assert driver.host == "host1"
    driver.close()
    assert driver.closed


def test_fake_driver_counts_only_real_spawns_and_destroys(
    fake_resources: HostResources, plain_spec: GuestSpec
) -> None:
    driver = FakeDriver(fake_resources)

    driver.spawn(plain_spec)
    driver.spawn(plain_spec)
    driver.destroy(plain_spec.uuid)
    driver.destroy(plain_spec.uuid)

    assert (driver.spawn_count, driver.destroy_count) == (1, 1)


def test_a_crash_dump_is_an_nmi_into_a_running_or_paused_guest_only(
    any_driver: ComputeDriver, plain_spec: GuestSpec
) -> None:
    any_driver.spawn(plain_spec)
    any_driver.trigger_crash_dump(plain_spec.uuid)
    any_driver.pause(plain_spec.uuid)
    any_driver.trigger_crash_dump(plain_spec.uuid)
    assert _state(any_driver, plain_spec.uuid) == PAUSED  # an NMI changes no state

    any_driver.power_off(plain_spec.uuid)
    with pytest.raises(InstanceNotRunning, match=f"Instance {plain_spec.uuid} is not running"):
        any_driver.trigger_crash_dump(plain_spec.uuid)
    any_driver.destroy(plain_spec.uuid)
    with pytest.raises(DomainNotFound):
        any_driver.trigger_crash_dump(plain_spec.uuid)
    if isinstance(any_driver, FakeDriver):
        assert any_driver.nmis == [plain_spec.uuid, plain_spec.uuid]
