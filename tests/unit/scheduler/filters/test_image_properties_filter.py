"""ImagePropertiesFilter: image architecture, hypervisor type, VM mode and version against
the host's supported instances and hypervisor version."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler import hypervisor_version
from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]
KVM_X86 = (("x86_64", "kvm", "hvm"),)
QEMU_6_2_0 = 6_002_000


@pytest.fixture
def images(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("ImagePropertiesFilter")


def _kvm_host(host: HostFactory, **overrides: object) -> HostState:
    return host(supported_instances=KVM_X86, hypervisor_version=QEMU_6_2_0, **overrides)


def test_image_filter_passes_an_image_without_properties_on_any_host(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert images.host_passes(host(supported_instances=()), spec()) is True


def test_image_filter_passes_a_host_supporting_the_image_triple(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    props = {"hw_architecture": "x86_64", "img_hv_type": "kvm", "hw_vm_mode": "hvm"}
    assert images.host_passes(_kvm_host(host), spec(image_properties=props)) is True


def test_image_filter_rejects_a_host_of_another_architecture(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(image_properties={"hw_architecture": "aarch64"})
    assert images.host_passes(_kvm_host(host), request) is False


def test_image_filter_rejects_a_host_of_another_hypervisor_type_or_vm_mode(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert not images.host_passes(_kvm_host(host), spec(image_properties={"img_hv_type": "xen"}))
    assert not images.host_passes(_kvm_host(host), spec(image_properties={"hw_vm_mode": "exe"}))


def test_image_filter_passes_when_any_supported_triple_matches(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    multi = host(supported_instances=(("x86_64", "kvm", "hvm"), ("i686", "kvm", "hvm")))
    assert images.host_passes(multi, spec(image_properties={"hw_architecture": "i686"})) is True


def test_image_filter_rejects_a_host_advertising_no_supported_instances(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(image_properties={"hw_architecture": "x86_64"})
    assert images.host_passes(host(supported_instances=()), request) is False


def test_image_filter_compares_each_property_with_its_own_position(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    xen = host(supported_instances=(("x86_64", "xen", "hvm"),))
    assert images.host_passes(xen, spec(image_properties={"hw_vm_mode": "xen"})) is False


@pytest.mark.parametrize(
    ("image_arch", "host_arch"),
    [("amd64", "x86_64"), ("x86_32", "i686"), ("i386", "i686"), ("X86_64", "x86_64")],
)
def test_image_filter_canonicalises_architecture_names_as_nova_does(
    images: BaseFilter, host: HostFactory, spec: SpecFactory, image_arch: str, host_arch: str
) -> None:
    canonical = host(supported_instances=((host_arch, "kvm", "hvm"),))
    request = spec(image_properties={"hw_architecture": image_arch})
    assert images.host_passes(canonical, request) is True


def test_image_filter_canonicalises_hypervisor_types_and_vm_modes(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    xen = host(supported_instances=(("x86_64", "xen", "xen"),))
    request = spec(image_properties={"img_hv_type": "xapi", "hw_vm_mode": "pv"})
    assert images.host_passes(xen, request) is True
    hvm = _kvm_host(host)
    assert images.host_passes(hvm, spec(image_properties={"hw_vm_mode": "HV"})) is True


def test_image_filter_uses_the_default_architecture_when_the_image_has_none(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    images = make_filter(
        "ImagePropertiesFilter",
        filter_scheduler={"image_properties_default_architecture": "aarch64"},
    )
    assert images.host_passes(_kvm_host(host), spec()) is False
    arm = host(supported_instances=(("aarch64", "kvm", "hvm"),))
    assert images.host_passes(arm, spec()) is True
    explicit = spec(image_properties={"hw_architecture": "x86_64"})
    assert images.host_passes(_kvm_host(host), explicit) is True


def test_image_filter_checks_the_requested_hypervisor_version(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    def wanting(version: str) -> RequestSpec:
        props = {"img_hv_type": "kvm", "img_hv_requested_version": version}
        return spec(image_properties=props)

    kvm = _kvm_host(host)
    assert images.host_passes(kvm, wanting(">=6.0")) is True
    assert images.host_passes(kvm, wanting(">= 6.2.0")) is True
    assert images.host_passes(kvm, wanting(">=7.0")) is False
    # As in Nova, a dotless operand is a version too: 6000000 is no hypervisor's.
    assert images.host_passes(kvm, wanting(">=6000000")) is False
    assert images.host_passes(kvm, wanting("< 7")) is True
    assert images.host_passes(kvm, wanting(">=6.0,<6.2")) is False
    assert images.host_passes(kvm, wanting("six or later")) is False


def test_image_filter_ignores_the_version_when_the_host_reports_none(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    props = {"img_hv_type": "kvm", "img_hv_requested_version": ">=99.0"}
    unknown = host(supported_instances=KVM_X86, hypervisor_version=0)
    assert images.host_passes(unknown, spec(image_properties=props)) is True


def test_image_filter_like_nova_ignores_a_version_alone_without_a_triple_property(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(image_properties={"img_hv_requested_version": ">=99.0"})
    assert images.host_passes(_kvm_host(host), request) is True


def test_image_filter_checks_physical_address_bits_when_the_host_reports_them(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    props = {"hw_architecture": "x86_64", "hw_maxphysaddr_bits": "42"}
    wide = _kvm_host(host, cpu_info={"maxphysaddr": {"bits": 46}})
    narrow = _kvm_host(host, cpu_info={"maxphysaddr": {"bits": 39}})
    unknown = _kvm_host(host, cpu_info={})
    assert images.host_passes(wide, spec(image_properties=props)) is True
    assert images.host_passes(narrow, spec(image_properties=props)) is False
    assert images.host_passes(unknown, spec(image_properties=props)) is True


def version_satisfies(encoded: int, required: str) -> bool:
    return hypervisor_version.satisfied_by(hypervisor_version.parse(required), encoded)


@pytest.mark.parametrize(
    ("required", "expected"),
    [
        ("==6.2", True),
        ("==6.2.0", True),
        ("!=6.2.0", False),
        ("<6.10", True),
        (">6.1.9", True),
        ("<=6.2.0, >=6.2.0", True),
        # Nova (oslo.utils' VersionPredicate) reads an operand without a dot as a version
        # too: "< 9" is below version 9, and 6002000 is a version no hypervisor has.
        ("< 9", True),
        (">= 7", False),
        ("==6002000", False),
        (">=6000000", False),
        # Pre-releases are PEP 440 versions (they used to raise inside the filter).
        (">= 6.0rc1", True),
        ("< 6.2.1rc1", True),
        ("< 6.2rc1", False),
    ],
)
def test_version_requirements_compare_as_nova_does(required: str, expected: bool) -> None:
    assert version_satisfies(QEMU_6_2_0, required) is expected


def test_a_host_version_is_spelt_as_oslo_utils_spells_it() -> None:
    assert str(hypervisor_version.as_version(7002022)) == "7.2.22"
    assert str(hypervisor_version.as_version(6000000)) == "6.0.0"
    assert str(hypervisor_version.as_version(5000)) == "5.0"


@pytest.mark.parametrize("required", ["6.0", "8.2", "=>6.0", "= 6.0", ">=", ">=x.y", ">= 6.0,"])
def test_a_malformed_version_requirement_is_an_error(required: str) -> None:
    with pytest.raises(ValueError):
        hypervisor_version.parse(required)


def test_image_filter_applies_a_dotless_requirement_as_a_version(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert (
        images.host_passes(
            _kvm_host(host), spec(image_properties={"img_hv_requested_version": "< 9"})
        )
        is True
    )


def test_image_filter_runs_once_per_request(images: BaseFilter) -> None:
    assert images.run_filter_once_per_request is True


def test_image_filter_reads_legacy_property_names_as_nova_s_image_metadata(
    images: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    arm = spec(image_properties={"architecture": "aarch64"})
    assert images.host_passes(_kvm_host(host), arm) is False
    assert images.host_passes(_kvm_host(host), spec(image_properties={"vm_mode": "exe"})) is False
    assert (
        images.host_passes(_kvm_host(host), spec(image_properties={"hypervisor_type": "xen"}))
        is False
    )
    old = spec(image_properties={"architecture": "x86_64", "hypervisor_version_requires": ">= 9"})
    assert images.host_passes(_kvm_host(host), old) is False
    # The current name wins over the legacy one.
    both = spec(image_properties={"architecture": "aarch64", "hw_architecture": "x86_64"})
    assert images.host_passes(_kvm_host(host), both) is True
