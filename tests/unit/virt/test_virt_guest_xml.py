"""Guest XML: config objects, designer policy, golden files, and every golden XML
defined, started, destroyed and undefined on a fresh test driver."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from lxml import etree

from novaq.exceptions import ConfigError
from virt import power_state
from virt.driver import GuestSpec, ImageSpec
from virt.libvirt.config import LibvirtConfigGuest, LibvirtConfigGuestHostdevPCI
from virt.libvirt.config_caps import LibvirtConfigCaps
from virt.libvirt.designer import GuestPlatform, choose_platform, design_guest
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.options import GuestOptions

from .conftest import GOLDEN_DIR

INSTANCES = Path("/var/lib/novaq/instances")
TEST_PLATFORM = GuestPlatform(virt_type="test", arch="i686")
KVM = GuestPlatform(virt_type="kvm", arch="x86_64")
QEMU = GuestPlatform(virt_type="qemu", arch="x86_64")


def _caps(host_arch: str, guests: list[tuple[str, str, list[str]]]) -> LibvirtConfigCaps:
    root = etree.Element("capabilities")
    cpu = etree.SubElement(etree.SubElement(root, "host"), "cpu")
    etree.SubElement(cpu, "arch").text = host_arch
    for os_type, arch, domain_types in guests:
        guest = etree.SubElement(root, "guest")
        etree.SubElement(guest, "os_type").text = os_type
        arch_element = etree.SubElement(guest, "arch", name=arch)
        for domain_type in domain_types:
            etree.SubElement(arch_element, "domain", type=domain_type)
    return LibvirtConfigCaps.from_element(root)


@pytest.mark.parametrize(
    ("guests", "expected"),
    [
        ([("hvm", "x86_64", ["qemu", "kvm"])], GuestPlatform("kvm", "x86_64")),
        ([("hvm", "x86_64", ["qemu"])], GuestPlatform("qemu", "x86_64")),
        ([("hvm", "i686", ["kvm"]), ("hvm", "x86_64", ["qemu"])], GuestPlatform("qemu", "x86_64")),
        (
            [("xen", "x86_64", ["xen"]), ("hvm", "x86_64", ["test"])],
            GuestPlatform("test", "x86_64"),
        ),
    ],
)
def test_choose_platform_prefers_kvm_then_qemu_on_the_host_arch(
    guests: list[tuple[str, str, list[str]]], expected: GuestPlatform
) -> None:
    assert choose_platform(_caps("x86_64", guests)) == expected


def test_choose_platform_on_the_test_driver(driver: LibvirtDriver) -> None:
    caps = LibvirtConfigCaps.from_xml(driver.host.get_capabilities_xml())

    assert choose_platform(caps) == TEST_PLATFORM


@pytest.mark.parametrize("virt_type", ["kvm", "qemu"])
def test_choose_platform_takes_the_configured_virt_type(virt_type: str) -> None:
    caps = _caps("x86_64", [("hvm", "x86_64", ["qemu", "kvm"])])

    assert choose_platform(caps, virt_type) == GuestPlatform(virt_type, "x86_64")


def test_a_virt_type_libvirt_does_not_offer_is_a_clear_error() -> None:
    caps = _caps("x86_64", [("hvm", "x86_64", ["qemu"])])

    with pytest.raises(ConfigError, match=r"virt_type.*no 'kvm'.*qemu \(x86_64\).*set correctly"):
        choose_platform(caps, "kvm")


def _define_start_destroy_undefine(driver: LibvirtDriver, xml: str) -> None:
    conn = driver.host.get_connection()
    domain = conn.defineXML(xml)
    domain.create()
    assert domain.state()[0] == power_state.VIR_DOMAIN_RUNNING
    domain.destroy()
    domain.undefine()
    assert conn.listAllDomains(0) == []


def _named(spec: GuestSpec) -> GuestSpec:
    return replace(spec, display_name="web-1", flavor_name="m1.small")


# (golden file, spec fixture, platform, options, owning host): one case per feature.
GOLDEN_CASES = [
    ("guest_plain.xml", "plain_spec", TEST_PLATFORM, GuestOptions(), None),
    ("guest_two_gpus.xml", "gpu_spec", TEST_PLATFORM, GuestOptions(), None),
    ("guest_kvm.xml", "plain_spec", KVM, GuestOptions(), "host1"),
    ("guest_qemu.xml", "plain_spec", QEMU, GuestOptions(virt_type="qemu"), "host1"),
    (
        "guest_cpu_custom.xml",
        "plain_spec",
        KVM,
        GuestOptions(cpu_mode="custom", cpu_models=("Haswell-noTSX",)),
        "host1",
    ),
    (
        "guest_cpu_passthrough.xml",
        "plain_spec",
        KVM,
        GuestOptions(cpu_mode="host-passthrough"),
        None,
    ),
    (
        "guest_no_balloon_stats.xml",
        "plain_spec",
        QEMU,
        GuestOptions(mem_stats_period_seconds=0),
        None,
    ),
    ("guest_metadata.xml", "gpu_spec", QEMU, GuestOptions(virt_type="qemu"), "host2"),
]


@pytest.mark.parametrize(
    ("golden_name", "spec_fixture", "platform", "options", "host"),
    GOLDEN_CASES,
    ids=[case[0] for case in GOLDEN_CASES],
)
def test_guest_xml_matches_golden_and_runs_on_the_test_driver(
    golden_name: str,
    spec_fixture: str,
    platform: GuestPlatform,
    options: GuestOptions,
    host: str | None,
    request: pytest.FixtureRequest,
    golden: Callable[[str, str], None],
    driver: LibvirtDriver,
) -> None:
    spec: GuestSpec = request.getfixturevalue(spec_fixture)
    if golden_name == "guest_metadata.xml":
        spec = _named(spec)
    xml = design_guest(spec, platform, INSTANCES, options=options, host=host).to_xml()

    golden(golden_name, xml)
    _define_start_destroy_undefine(driver, xml)


def test_the_driver_designs_with_its_options_and_owner(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    expected = design_guest(plain_spec, TEST_PLATFORM, driver.instances_path, host="host1")

    assert driver.guest_xml(plain_spec) == expected.to_xml()


def test_x86_guests_get_acpi_apic_and_novas_clock(plain_spec: GuestSpec) -> None:
    domain = design_guest(plain_spec, KVM, INSTANCES).to_element()

    assert [f.tag for f in domain.find("features")] == ["acpi", "apic"]
    assert domain.find("clock").get("offset") == "utc"
    timers = [dict(t.attrib) for t in domain.iterfind("clock/timer")]
    assert timers == [
        {"name": "pit", "tickpolicy": "delay"},
        {"name": "rtc", "tickpolicy": "catchup"},
        {"name": "hpet", "present": "no"},
    ]
    actions = [domain.findtext(t) for t in ("on_poweroff", "on_reboot", "on_crash")]
    assert actions == ["destroy", "restart", "destroy"]


def test_other_arches_get_no_x86_features_or_timers(plain_spec: GuestSpec) -> None:
    domain = design_guest(plain_spec, GuestPlatform("qemu", "aarch64"), INSTANCES).to_element()

    assert domain.find("features") is None
    assert domain.findall("clock/timer") == []


@pytest.mark.parametrize(
    ("platform", "options", "expected"),
    [
        (KVM, GuestOptions(), {"mode": "host-model"}),
        (QEMU, GuestOptions(virt_type="qemu"), None),
        (TEST_PLATFORM, GuestOptions(), None),
        (QEMU, GuestOptions(cpu_mode="host-model"), {"mode": "host-model"}),
        (KVM, GuestOptions(cpu_mode="none"), None),
    ],
)
def test_cpu_mode_defaults_as_nova(
    plain_spec: GuestSpec,
    platform: GuestPlatform,
    options: GuestOptions,
    expected: dict[str, str] | None,
) -> None:
    cpu = design_guest(plain_spec, platform, INSTANCES, options=options).to_element().find("cpu")

    assert (dict(cpu.attrib) if cpu is not None else None) == expected


def test_the_serial_console_is_logged_in_the_instance_directory(plain_spec: GuestSpec) -> None:
    config = design_guest(plain_spec, KVM, INSTANCES)
    domain = config.to_element()

    log = INSTANCES / plain_spec.uuid / "console.log"
    assert domain.find("devices/serial").get("type") == "pty"
    assert dict(domain.find("devices/serial/log").attrib) == {"file": str(log), "append": "off"}
    assert domain.find("devices/console").get("type") == "pty"
    assert config.serial_log_file == str(log)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"virt_type": "lxc"}, "virt_type"),
        ({"cpu_mode": "custom"}, "cpu_models"),
        ({"cpu_models": ("Haswell",)}, "cpu_models"),
        ({"cpu_mode": "bogus"}, "cpu_mode"),
    ],
)
def test_bad_guest_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GuestOptions(**options)  # type: ignore[arg-type]


def test_hostdevs_follow_the_requested_addresses(gpu_spec: GuestSpec) -> None:
    domain = design_guest(gpu_spec, TEST_PLATFORM, INSTANCES).to_element()

    addresses = [a.attrib for a in domain.iterfind("devices/hostdev/source/address")]
    assert [dict(a) for a in addresses] == [
        {"domain": "0x0000", "bus": "0x08", "slot": "0x00", "function": "0x0"},
        {"domain": "0x0000", "bus": "0x88", "slot": "0x00", "function": "0x0"},
    ]
    assert [h.get("managed") for h in domain.iterfind("devices/hostdev")] == ["yes", "yes"]


def test_disks_are_named_as_nova_names_them(gpu_spec: GuestSpec, plain_spec: GuestSpec) -> None:
    gpu = design_guest(gpu_spec, TEST_PLATFORM, INSTANCES).to_element()
    plain = design_guest(plain_spec, TEST_PLATFORM, INSTANCES).to_element()

    sources = [s.get("file") for s in gpu.iterfind("devices/disk/source")]
    assert sources == [
        str(INSTANCES / gpu_spec.uuid / n) for n in ("disk", "disk.eph0", "disk.swap")
    ]
    assert [t.get("dev") for t in gpu.iterfind("devices/disk/target")] == ["vda", "vdb", "vdc"]
    assert len(plain.findall("devices/disk")) == 1


def test_config_round_trips(gpu_spec: GuestSpec) -> None:
    config = design_guest(gpu_spec, TEST_PLATFORM, INSTANCES)

    assert LibvirtConfigGuest.from_xml(config.to_xml()) == config


@pytest.mark.parametrize("golden", sorted(GOLDEN_DIR.glob("guest_*.xml")), ids=lambda p: p.stem)
def test_the_pci_addresses_in_a_domain_are_its_configs_hostdevs(golden: Path) -> None:
    xml = golden.read_text(encoding="utf-8")

    addresses = LibvirtConfigGuest.pci_addresses_in(xml)

    assert addresses == tuple(h.address for h in LibvirtConfigGuest.from_xml(xml).hostdevs)


def test_the_pci_addresses_in_the_two_gpu_domain_are_in_device_order() -> None:
    xml = (GOLDEN_DIR / "guest_two_gpus.xml").read_text(encoding="utf-8")

    assert LibvirtConfigGuest.pci_addresses_in(xml) == ("0000:08:00.0", "0000:88:00.0")


@pytest.mark.parametrize("address", ["0000:08:00.0", "0001:ff:1f.7", "0000:3b:00.1"])
def test_hostdev_address_round_trips(address: str) -> None:
    hostdev = LibvirtConfigGuestHostdevPCI.from_address(address)

    assert hostdev.address == address
    assert LibvirtConfigGuestHostdevPCI.from_xml(hostdev.to_xml()) == hostdev


def test_special_characters_are_escaped_and_survive_libvirt(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    name = "a<b&\"c'"
    image = "<img> & 'x'"
    spec = replace(plain_spec, name=name, image=ImageSpec(id=image, name=image, location=""))
    xml = driver.guest_xml(spec)

    assert "a&lt;b&amp;" in xml
    info = driver.spawn(spec)
    parsed = LibvirtConfigGuest.from_xml(info.xml)
    assert info.name == parsed.name == name
    assert parsed.metadata is not None and parsed.metadata.image == image


def test_from_element_reads_what_libvirt_gives_back(
    driver: LibvirtDriver, gpu_spec: GuestSpec
) -> None:
    info = driver.spawn(_named(gpu_spec))

    parsed = LibvirtConfigGuest.from_xml(info.xml)
    expected = design_guest(_named(gpu_spec), TEST_PLATFORM, driver.instances_path, host="host1")
    assert parsed == expected


@pytest.mark.parametrize(
    ("platform", "options"),
    [(KVM, GuestOptions(cpu_mode="custom", cpu_models=("Haswell",))), (QEMU, GuestOptions())],
)
def test_config_round_trips_every_feature(
    gpu_spec: GuestSpec, platform: GuestPlatform, options: GuestOptions
) -> None:
    config = design_guest(_named(gpu_spec), platform, INSTANCES, options=options, host="h")

    assert LibvirtConfigGuest.from_xml(config.to_xml()) == config


DOMAIN_SCHEMA = Path("/usr/share/libvirt/schemas/domain.rng")


@pytest.mark.parametrize("golden_name", [case[0] for case in GOLDEN_CASES])
def test_every_golden_guest_is_valid_for_libvirts_domain_schema(golden_name: str) -> None:
    """What a real libvirtd would parse, not only the lenient test driver (the schema
    ships with libvirt's Debian packages, which CI installs)."""
    if not DOMAIN_SCHEMA.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{DOMAIN_SCHEMA} is missing")
        pytest.skip(f"no {DOMAIN_SCHEMA} here")
    schema = etree.RelaxNG(etree.parse(str(DOMAIN_SCHEMA)))
    document = etree.parse(str(GOLDEN_DIR / golden_name))

    assert schema.validate(document), schema.error_log.last_error
