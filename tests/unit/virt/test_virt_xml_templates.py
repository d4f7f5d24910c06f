"""Guest XML from the template of its shape (``virt.libvirt.xml_templates``): always the
designer's XML byte for byte, the designer asked once per shape, and any guest whose
strings lxml would escape or refuse designed in full."""

from __future__ import annotations

import uuid as uuid_module
from dataclasses import replace
from pathlib import Path

import pytest

from virt.driver import GuestSpec
from virt.libvirt.designer import GuestPlatform, design_guest
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.xml_templates import NAME_MARKER, UUID_MARKER, GuestXmlTemplates

KVM = GuestPlatform(virt_type="kvm", arch="x86_64")
INSTANCES = Path("/var/lib/novaq/instances")


class CountingDesigner:
    """The designer's full XML of a spec, counting the specs it was asked for."""

    def __init__(self) -> None:
        self.asked: list[GuestSpec] = []

    def __call__(self, spec: GuestSpec) -> str:
        self.asked.append(spec)
        return design_guest(spec, KVM, INSTANCES, host="host1").to_xml()


def _guest(spec: GuestSpec, number: int, display_name: str) -> GuestSpec:
    return replace(
        spec,
        uuid=str(uuid_module.uuid4()),
        name=f"instance-{number:08x}",
        display_name=display_name,
    )


@pytest.mark.parametrize("spec_fixture", ["plain_spec", "gpu_spec"])
@pytest.mark.parametrize(
    "display_name",
    ["", "web-1", "a server named with spaces", "café ☕", "über.example:8080/x"],
)
def test_a_templated_guest_xml_is_the_designers_byte_for_byte(
    spec_fixture: str, display_name: str, request: pytest.FixtureRequest
) -> None:
    spec: GuestSpec = request.getfixturevalue(spec_fixture)
    designer = CountingDesigner()
    templates = GuestXmlTemplates(designer)
    for number in range(3):
        guest = _guest(spec, number, display_name)
        assert templates.xml(guest) == design_guest(guest, KVM, INSTANCES, host="host1").to_xml()
    # The shape was designed once, for its stand-in and the check of it; no guest was.
    assert len(designer.asked) == 2 and designer.asked[0].uuid == UUID_MARKER
    assert designer.asked[0].name == NAME_MARKER


@pytest.mark.parametrize(
    "display_name",
    ["Tom & Jerry", "<b>", 'say "hi"', "it's", "tab\there", "line\nbreak", NAME_MARKER],
)
def test_a_guest_with_a_string_xml_escapes_is_designed_in_full(
    plain_spec: GuestSpec, display_name: str
) -> None:
    designer = CountingDesigner()
    guest = _guest(plain_spec, 7, display_name)

    xml = GuestXmlTemplates(designer).xml(guest)

    assert xml == design_guest(guest, KVM, INSTANCES, host="host1").to_xml()
    assert designer.asked == [guest]


def test_an_upper_case_uuid_is_designed_in_full(plain_spec: GuestSpec) -> None:
    designer = CountingDesigner()
    guest = replace(plain_spec, uuid=plain_spec.uuid.upper())

    assert GuestXmlTemplates(designer).xml(guest) == designer(guest)
    assert designer.asked == [guest, guest]


def test_each_shape_has_its_own_template(plain_spec: GuestSpec) -> None:
    designer = CountingDesigner()
    templates = GuestXmlTemplates(designer)
    small, large = _guest(plain_spec, 1, "a"), replace(_guest(plain_spec, 2, "b"), memory_mb=4096)

    assert templates.xml(small) == design_guest(small, KVM, INSTANCES, host="host1").to_xml()
    assert templates.xml(large) == design_guest(large, KVM, INSTANCES, host="host1").to_xml()
    assert templates.xml(small, context="other host") == templates.xml(small)
    assert [s.memory_mb for s in designer.asked] == [2048, 2048, 4096, 4096, 2048, 2048]


def test_a_shape_whose_xml_uses_the_uuid_otherwise_is_never_templated(
    plain_spec: GuestSpec,
) -> None:
    def designer(spec: GuestSpec) -> str:  # a designer that derives a value from the uuid
        xml = design_guest(spec, KVM, INSTANCES).to_xml()
        return xml.replace("</domain>", f"<serial>{spec.uuid[::-1]}</serial></domain>")

    guest = _guest(plain_spec, 3, "web")

    assert GuestXmlTemplates(designer).xml(guest) == designer(guest)


def test_the_driver_defines_the_templated_xml_of_each_guest(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.init_host("host1")
    for number in range(2):
        guest = _guest(plain_spec, number, f"web-{number}")
        expected = design_guest(
            guest, driver._guest_platform(), driver.instances_path, host="host1"
        ).to_xml()
        assert driver.guest_xml(guest) == expected
