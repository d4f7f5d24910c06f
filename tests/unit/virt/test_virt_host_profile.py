from __future__ import annotations

from typing import Any

import pytest

from novaq.exceptions import InvalidInput
from virt.host_profile import HostProfile, PciDeviceSpec, default_profiles


def test_default_profiles_give_host1_two_m4000_gpus() -> None:
    hosts = default_profiles(3)

    assert [h.name for h in hosts] == ["host1", "host2", "host3"]
    assert all((h.vcpus, h.memory_mb, h.local_gb) == (16, 32768, 500) for h in hosts)
    gpus = hosts[0].pci_devices
    assert [(g.address, g.vendor_id, g.product_id) for g in gpus] == [
        ("0000:08:00.0", "10de", "13f1"),
        ("0000:88:00.0", "10de", "13f1"),
    ]
    assert hosts[1].pci_devices == () and hosts[2].pci_devices == ()
    assert not any(h.fail_spawn for h in hosts)


@pytest.mark.parametrize("n", [0, -1, True, "2"])
def test_default_profiles_rejects_bad_counts(n: Any) -> None:
    with pytest.raises(InvalidInput, match="number of hosts"):
        default_profiles(n)


@pytest.mark.parametrize(
    ("field", "value"),
    [("vcpus", 0), ("memory_mb", -1), ("local_gb", 0), ("vcpus", 1.5), ("memory_mb", True)],
)
def test_host_profile_rejects_non_positive_sizes(field: str, value: Any) -> None:
    with pytest.raises(InvalidInput, match=f"host h1: {field} must be a positive integer"):
        HostProfile(name="h1", **{field: value})


def test_host_profile_rejects_empty_name() -> None:
    with pytest.raises(InvalidInput, match="host name"):
        HostProfile(name=" ")


def test_host_profile_rejects_duplicate_pci_addresses() -> None:
    gpu = PciDeviceSpec("0000:08:00.0", "10de", "13f1")
    with pytest.raises(InvalidInput, match="duplicate PCI address"):
        HostProfile(name="h1", pci_devices=(gpu, gpu))


def test_host_profile_rejects_a_list_of_devices() -> None:
    gpu = PciDeviceSpec("0000:08:00.0", "10de", "13f1")
    with pytest.raises(InvalidInput, match="tuple of PciDeviceSpec"):
        HostProfile(name="h1", pci_devices=[gpu])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "address", ["0000:08:00", "0000:08:00.8", "0000:0G:00.0", "0000:08:00.0 ", "0000:08:00:0"]
)
def test_pci_device_rejects_malformed_addresses(address: str) -> None:
    with pytest.raises(InvalidInput, match="not of the form 0000:08:00.0"):
        PciDeviceSpec(address, "10de", "13f1")


def test_pci_device_wants_lower_case_addresses() -> None:
    with pytest.raises(InvalidInput):
        PciDeviceSpec("0000:8A:00.0", "10de", "13f1")


@pytest.mark.parametrize(
    ("field", "value"), [("vendor_id", "10DE"), ("vendor_id", "0x10de"), ("product_id", "13f")]
)
def test_pci_device_rejects_malformed_ids(field: str, value: str) -> None:
    ids = {"vendor_id": "10de", "product_id": "13f1", field: value}
    with pytest.raises(InvalidInput, match=f"{field} must be 4 lower-case hex digits"):
        PciDeviceSpec("0000:08:00.0", ids["vendor_id"], ids["product_id"])


def test_pci_device_rejects_negative_numa_node() -> None:
    with pytest.raises(InvalidInput, match="numa_node"):
        PciDeviceSpec("0000:08:00.0", "10de", "13f1", numa_node=-1)
