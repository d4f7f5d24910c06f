"""PciPassthroughFilter: the host's free device pools must cover every PCI request."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compute.pci import PciRequest
from scheduler.filters import BaseFilter
from scheduler.host_state import HostState, take_pci_devices
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]
GPU = ("10de", "13f1", "type-PCI")


def _gpus(count: int, alias: str = "gpu") -> PciRequest:
    return PciRequest(alias=alias, count=count, vendor_id="10de", product_id="13f1")


@pytest.fixture
def pci(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("PciPassthroughFilter")


def test_pci_filter_passes_any_host_when_no_devices_are_requested(
    pci: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert pci.host_passes(host(), spec()) is True


def test_pci_filter_passes_a_host_with_enough_free_devices(
    pci: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert pci.host_passes(host(pci_pools={GPU: 2}), spec(pci_requests=(_gpus(2),))) is True


def test_pci_filter_rejects_a_host_with_too_few_or_no_matching_devices(
    pci: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert pci.host_passes(host(pci_pools={GPU: 1}), spec(pci_requests=(_gpus(2),))) is False
    other = ("8086", "1520", "type-VF")
    assert pci.host_passes(host(pci_pools={other: 4}), spec(pci_requests=(_gpus(1),))) is False


def test_pci_filter_adds_up_requests_for_the_same_device(
    pci: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(pci_requests=(_gpus(1, "a"), _gpus(1, "b")))
    assert pci.host_passes(host(pci_pools={GPU: 1}), request) is False
    assert pci.host_passes(host(pci_pools={GPU: 2}), request) is True


def test_pci_filter_serves_an_untyped_alias_from_any_type_but_pfs(
    pci: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # Nova: an alias without device_type matches PCI devices and VFs, never a PF.
    vfs, pfs = ("10de", "13f1", "type-VF"), ("10de", "13f1", "type-PF")
    request = spec(pci_requests=(_gpus(2),))
    assert pci.host_passes(host(pci_pools={GPU: 1, vfs: 1}), request) is True
    assert pci.host_passes(host(pci_pools={pfs: 4}), request) is False
    assert pci.host_passes(host(pci_pools={GPU: 1, pfs: 4}), request) is False


def test_pci_filter_gives_typed_requests_their_devices_first(
    pci: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    vfs = ("10de", "13f1", "type-VF")
    typed = PciRequest(
        alias="vf", count=1, vendor_id="10de", product_id="13f1", device_type="type-VF"
    )
    request = spec(pci_requests=(_gpus(1), typed))
    assert pci.host_passes(host(pci_pools={GPU: 1, vfs: 1}), request) is True
    assert pci.host_passes(host(pci_pools={vfs: 1}), request) is False


def test_an_untyped_request_is_debited_from_the_pools_it_may_use(host: HostFactory) -> None:
    vfs = ("10de", "13f1", "type-VF")
    state = host(pci_pools={GPU: 1, vfs: 2})
    take_pci_devices(state.pci_pools, (_gpus(2),))
    assert sum(state.pci_pools.values()) == 1
    assert min(state.pci_pools.values()) == 0
