from __future__ import annotations

from collections.abc import Callable

from compute.pci import PciRequest
from scheduler.host_state import HostState
from scheduler.weights.pci import PCIWeigher

Host = Callable[..., HostState]
GPU_POOL = ("10de", "13f1", "type-PCI")
NIC_POOL = ("8086", "154d", "type-VF")
GPU = PciRequest(alias="gpu", count=1, vendor_id="10de", product_id="13f1")


def test_raw_value_is_100_minus_free_devices_capped_at_99(
    make_host: Host, make_spec, make_settings
) -> None:
    weigher = PCIWeigher(make_settings())
    request = make_spec()
    assert weigher.weigh(make_host("none"), request) == 100.0
    assert weigher.weigh(make_host("four", pci_pools={GPU_POOL: 3, NIC_POOL: 1}), request) == 96.0
    assert weigher.weigh(make_host("many", pci_pools={NIC_POOL: 99}), request) == 1.0
    assert weigher.weigh(make_host("lots", pci_pools={NIC_POOL: 500}), request) == 1.0
    assert PCIWeigher.minval is None and PCIWeigher.maxval is None


def test_request_without_pci_avoids_pci_hosts(make_host: Host, ranked) -> None:
    hosts = [
        make_host("gpus", pci_pools={GPU_POOL: 4}),
        make_host("plain"),
        make_host("one-gpu", pci_pools={GPU_POOL: 1}),
    ]
    assert ranked(["PCIWeigher"], hosts) == ["plain", "one-gpu", "gpus"]


def test_request_with_pci_stacks_on_the_host_with_fewest_free_devices(
    make_host: Host, make_spec, ranked
) -> None:
    # PciPassthroughFilter has already removed hosts without a matching device.
    hosts = [
        make_host("four", pci_pools={GPU_POOL: 4}),
        make_host("two", pci_pools={GPU_POOL: 2}),
        make_host("eight", pci_pools={GPU_POOL: 8}),
    ]
    request = make_spec(pci_requests=(GPU,))
    assert ranked(["PCIWeigher"], hosts, request) == ["two", "four", "eight"]


def test_multiplier_scales_it_against_other_weighers(
    make_host: Host, make_settings, ranked
) -> None:
    # PCI: gpus 0, plain 1.  RAM (minval 0): gpus 1, plain 0.5.
    hosts = [make_host("gpus", pci_pools={GPU_POOL: 4}, memory_mb=16384), make_host("plain")]
    assert ranked(["PCIWeigher", "RAMWeigher"], hosts) == ["plain", "gpus"]
    config = make_settings(pci_weight_multiplier=0.0)
    assert ranked(["PCIWeigher", "RAMWeigher"], hosts, config=config) == ["gpus", "plain"]
