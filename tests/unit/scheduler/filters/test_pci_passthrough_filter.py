"""PciPassthroughFilter: the host's free device pools must cover every PCI request."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compute.pci import PciRequest
from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
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
