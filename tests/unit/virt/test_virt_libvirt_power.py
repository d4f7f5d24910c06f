"""The libvirt driver's waited power operations, console log and guest ownership, on a
fresh ``test:///`` node. The test driver shuts a guest off at once on ACPI; a guest OS
that ignores ACPI is played by a ``Guest.shutdown`` that does nothing."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import libvirt
import pytest

from novaq.exceptions import (
    DomainNotFound,
    HypervisorError,
    InstanceNotRunning,
    InvalidInput,
    TriggerCrashDumpNotSupported,
)
from virt import power_state
from virt.driver import GuestSpec
from virt.host_profile import HostProfile
from virt.libvirt.config import LibvirtConfigGuest
from virt.libvirt.designer import GuestPlatform, design_guest
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.guest import Guest
from virt.libvirt.options import GuestOptions
from virt.node_xml import test_uri, write_node_xml

from .conftest import MakeDriver

OTHER_UUID = "9b2f7c1e-0d4a-4c55-8f0e-5a6b7c8d9e01"


@pytest.fixture
def deaf_guests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Guests whose OS ignores the ACPI power button; returns the shutdown requests."""
    asked: list[str] = []
    monkeypatch.setattr(Guest, "shutdown", lambda self: asked.append(self.uuid))
    return asked


def _domain(driver: LibvirtDriver, uuid: str) -> Guest:
    return Guest(driver.host.lookup_domain(uuid))


def test_power_off_with_a_timeout_shuts_the_guest_down_cleanly(
    driver: LibvirtDriver, plain_spec: GuestSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver.spawn(plain_spec)
    destroyed: list[str] = []
    monkeypatch.setattr(Guest, "poweroff", lambda self: destroyed.append(self.uuid))

    driver.power_off(plain_spec.uuid, timeout_s=60)

    assert driver.get_info(plain_spec.uuid).power_state == power_state.SHUTDOWN
    assert destroyed == []  # it went down by itself: nothing left to destroy


def test_a_guest_that_ignores_acpi_is_asked_again_then_destroyed(
    make_driver: MakeDriver, gpu_profile: HostProfile, plain_spec: GuestSpec, deaf_guests: list[str]
) -> None:
    driver = make_driver(gpu_profile)
    driver.options = GuestOptions(shutdown_retry_interval_s=1)
    driver.spawn(plain_spec)

    started = time.monotonic()
    driver.power_off(plain_spec.uuid, timeout_s=2)

    assert 2 <= time.monotonic() - started < 5
    assert len(deaf_guests) >= 2  # asked again after the retry interval
    assert driver.get_info(plain_spec.uuid).power_state == power_state.SHUTDOWN


def test_power_off_without_a_timeout_destroys_at_once(
    driver: LibvirtDriver, plain_spec: GuestSpec, deaf_guests: list[str]
) -> None:
    driver.spawn(plain_spec)

    driver.power_off(plain_spec.uuid)

    assert deaf_guests == []
    assert driver.get_info(plain_spec.uuid).power_state == power_state.SHUTDOWN


def test_a_paused_guest_is_not_asked_and_powers_off_at_once(
    driver: LibvirtDriver, plain_spec: GuestSpec, deaf_guests: list[str]
) -> None:
    driver.spawn(plain_spec)
    driver.pause(plain_spec.uuid)

    driver.power_off(plain_spec.uuid, timeout_s=60)

    assert deaf_guests == []
    assert driver.get_info(plain_spec.uuid).power_state == power_state.SHUTDOWN


def test_soft_reboot_is_a_shutdown_then_a_new_boot(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    before = _domain(driver, plain_spec.uuid).domain_id

    driver.reboot(plain_spec, hard=False)

    assert driver.get_info(plain_spec.uuid).power_state == power_state.RUNNING
    assert _domain(driver, plain_spec.uuid).domain_id != before  # a new boot


def test_a_soft_reboot_the_guest_ignores_falls_back_to_hard(
    make_driver: MakeDriver, gpu_profile: HostProfile, plain_spec: GuestSpec, deaf_guests: list[str]
) -> None:
    driver = make_driver(gpu_profile)
    driver.options = GuestOptions(wait_soft_reboot_seconds=1)
    driver.spawn(plain_spec)
    before = _domain(driver, plain_spec.uuid).domain_id

    driver.reboot(plain_spec, hard=False)

    assert deaf_guests == [plain_spec.uuid]
    assert driver.get_info(plain_spec.uuid).power_state == power_state.RUNNING
    assert _domain(driver, plain_spec.uuid).domain_id != before  # rebooted hard


def test_soft_reboot_of_a_missing_guest_raises(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    with pytest.raises(DomainNotFound):
        driver.reboot(plain_spec, hard=False)


def test_hard_reboot_defines_the_guest_again_from_fresh_xml(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    grown = replace(plain_spec, memory_mb=4096, display_name="renamed")

    driver.reboot(grown, hard=True)

    info = driver.get_info(plain_spec.uuid)
    assert (info.power_state, info.memory_mb) == (power_state.RUNNING, 4096)
    metadata = LibvirtConfigGuest.from_xml(info.xml).metadata
    assert metadata is not None and metadata.display_name == "renamed"


def test_hard_reboot_of_a_lost_guest_defines_it_anew(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.reboot(plain_spec, hard=True)

    assert driver.get_info(plain_spec.uuid).power_state == power_state.RUNNING


def _console_log(driver: LibvirtDriver, uuid: str) -> Path:
    return driver.instances_path / uuid / "console.log"


def test_console_output_is_the_tail_of_console_log(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    _console_log(driver, plain_spec.uuid).write_text("boot\nNOVAQ-MARKER cpus=2\nlogin:")

    assert driver.get_console_output(plain_spec.uuid) == "boot\nNOVAQ-MARKER cpus=2\nlogin:"
    assert driver.get_console_output(plain_spec.uuid, length=2) == "NOVAQ-MARKER cpus=2\nlogin:"
    assert driver.get_console_output(plain_spec.uuid, length=0) == ""


def test_console_output_reads_at_most_100_kib(driver: LibvirtDriver, plain_spec: GuestSpec) -> None:
    driver.spawn(plain_spec)
    _console_log(driver, plain_spec.uuid).write_bytes(b"x" * 200_000 + b"\xff end")

    output = driver.get_console_output(plain_spec.uuid)

    assert len(output.encode()) <= 100 * 1024 + 2 and output.endswith("\ufffd end")


def test_console_output_is_empty_before_anything_was_logged(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)

    assert driver.get_console_output(plain_spec.uuid) == ""
    with pytest.raises(InvalidInput):
        driver.get_console_output(plain_spec.uuid, length=-1)
    with pytest.raises(DomainNotFound):
        driver.get_console_output(OTHER_UUID)


def test_a_driver_lists_only_its_own_guests(
    tmp_path: Path, gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    platform = GuestPlatform("test", "i686")
    other = replace(plain_spec, uuid=OTHER_UUID, name="theirs")
    theirs = design_guest(other, platform, host="host2").to_xml()
    stranger = (
        "<domain type='test'><name>not-novaq</name><memory>1024</memory>"
        "<os><type>hvm</type></os></domain>"
    )
    uri = test_uri(write_node_xml(gpu_profile, tmp_path / "node", (theirs, stranger)))
    driver = LibvirtDriver(uri, instances_path=tmp_path / "instances")
    try:
        assert driver.list_instance_uuids() == [OTHER_UUID]  # no owner yet: every novaq guest
        driver.init_host("host1")
        driver.spawn(plain_spec)

        assert driver.list_instance_uuids() == [plain_spec.uuid]
    finally:
        driver.close()


def test_a_test_uri_ignores_virt_type(tmp_path: Path, gpu_profile: HostProfile) -> None:
    uri = test_uri(write_node_xml(gpu_profile, tmp_path / "node", ()))
    driver = LibvirtDriver(uri, instances_path=tmp_path, options=GuestOptions(virt_type="qemu"))
    try:
        driver.init_host("host1")  # the test driver offers only 'test': no error

        assert LibvirtConfigGuest.from_xml(driver.guest_xml(_spec())).virt_type == "test"
    finally:
        driver.close()


def _spec() -> GuestSpec:
    return GuestSpec(uuid=OTHER_UUID, name="g", vcpus=1, memory_mb=512, root_gb=1)


class _RefusingDomain:
    """A ``virDomain`` stand-in whose NMI injection fails with libvirt's ``code``: the
    test driver supports NMIs, so a hypervisor without them is played here."""

    def __init__(self, code: int) -> None:
        self.code = code

    def UUIDString(self) -> str:  # noqa: N802 - libvirt's name
        return "3f1c0f51-5a6e-4bcb-9b0f-2a4d0f7e2c11"

    def injectNMI(self) -> None:  # noqa: N802 - libvirt's name
        error = libvirt.libvirtError("refused")
        error.err = (self.code, 0, "refused", 0, "", None, None, 0, 0)
        raise error


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        (libvirt.VIR_ERR_NO_SUPPORT, TriggerCrashDumpNotSupported),
        (libvirt.VIR_ERR_OPERATION_INVALID, InstanceNotRunning),
        (libvirt.VIR_ERR_NO_DOMAIN, DomainNotFound),
        (libvirt.VIR_ERR_INTERNAL_ERROR, HypervisorError),
    ],
)
def test_a_refused_nmi_is_nova_s_error(code: int, raised: type[Exception]) -> None:
    with pytest.raises(raised):
        Guest(_RefusingDomain(code)).inject_nmi()


class _ShutDownMeanwhile:
    """A ``virDomain`` running when asked, whose guest finished its clean shutdown just
    before the destroy: libvirt refuses the destroy of a domain that is not running."""

    def __init__(self, still_running: bool) -> None:
        self.still_running = still_running
        self.asked = 0

    def UUIDString(self) -> str:  # noqa: N802 - libvirt's name
        return "5b0f7b9e-2f0e-4c55-8d36-0a8e3f8e1d21"

    def isActive(self) -> int:  # noqa: N802 - libvirt's name
        self.asked += 1
        return int(self.asked == 1 or self.still_running)

    def destroy(self) -> None:
        error = libvirt.libvirtError("domain is not running")
        error.err = (libvirt.VIR_ERR_OPERATION_INVALID, 0, "not running", 0, "", None, None, 0, 0)
        raise error


def test_a_guest_that_went_down_by_itself_before_the_destroy_is_off_not_an_error() -> None:
    Guest(_ShutDownMeanwhile(still_running=False)).poweroff_if_active()
    with pytest.raises(HypervisorError, match="not running"):
        Guest(_ShutDownMeanwhile(still_running=True)).poweroff_if_active()
