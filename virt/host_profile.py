"""Host profiles: what a simulated compute host has (CPUs, memory, disk, PCI devices).

Owns the validated description a simulated host is generated from (see
``virt.node_xml``) and the default fleet that ``novaq up --hosts N`` starts.
Refuses to know about libvirt or XML: a profile is plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from novaq.exceptions import InvalidInput

PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCI_ID_RE = re.compile(r"^[0-9a-f]{4}$")

NVIDIA_VENDOR_ID = "10de"
QUADRO_M4000_PRODUCT_ID = "13f1"
QUADRO_M4000_NAME = "GM204GL [Quadro M4000]"
DEFAULT_GPU_ADDRESSES = ("0000:08:00.0", "0000:88:00.0")


def validate_pci_address(address: object) -> str:
    """Return ``address`` if it is a lower-case ``dddd:bb:ss.f`` PCI address, else raise."""
    if not isinstance(address, str) or not PCI_ADDRESS_RE.match(address):
        raise InvalidInput(
            reason=f"PCI address {address!r} is not of the form 0000:08:00.0 (lower-case hex)"
        )
    return address


def _require_positive_int(owner: str, field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(reason=f"{owner}: {field} must be a positive integer, not {value!r}")


def _require_pci_id(owner: str, field: str, value: object) -> None:
    if not isinstance(value, str) or not PCI_ID_RE.match(value):
        raise InvalidInput(
            reason=f"{owner}: {field} must be 4 lower-case hex digits (e.g. 10de), not {value!r}"
        )


def _require_rate(owner: str, field: str, value: object) -> None:
    valid = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    if not valid:  # NOTE: NaN fails the comparison, so it is refused too
        raise InvalidInput(reason=f"{owner}: {field} must be a number from 0 to 1, not {value!r}")


@dataclass(frozen=True, slots=True)
class PciDeviceSpec:
    """One PCI device of a simulated host; ids are 4 lower-case hex digits, no ``0x``."""

    address: str
    vendor_id: str
    product_id: str
    numa_node: int | None = None
    product_name: str | None = None

    def __post_init__(self) -> None:
        validate_pci_address(self.address)
        owner = f"PCI device {self.address}"
        _require_pci_id(owner, "vendor_id", self.vendor_id)
        _require_pci_id(owner, "product_id", self.product_id)
        numa = self.numa_node
        if numa is not None and (isinstance(numa, bool) or not isinstance(numa, int) or numa < 0):
            raise InvalidInput(reason=f"{owner}: numa_node must be a non-negative int or None")


@dataclass(frozen=True, slots=True)
class HostProfile:
    """A simulated compute host: ``memory_mb`` in MiB, ``local_gb`` in GiB.

    ``fail_spawn`` makes a host whose hypervisor refuses to start guests, for
    failure drills (reschedule, compensation); ``spawn_failure_rate`` (0 to 1)
    makes a simulated host (``virt.simulated``) refuse that share of new guests;
    ``spawn_delay_s`` makes each new guest take that long to start (slow hardware, and
    a window in which to kill a worker mid-spawn in failure drills).
    """

    name: str
    vcpus: int = 16
    memory_mb: int = 32768
    local_gb: int = 500
    pci_devices: tuple[PciDeviceSpec, ...] = ()
    fail_spawn: bool = False
    spawn_failure_rate: float = 0.0
    spawn_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidInput(reason=f"host name must be a non-empty string, not {self.name!r}")
        owner = f"host {self.name}"
        for field in ("vcpus", "memory_mb", "local_gb"):
            _require_positive_int(owner, field, getattr(self, field))
        if not isinstance(self.pci_devices, tuple) or not all(
            isinstance(dev, PciDeviceSpec) for dev in self.pci_devices
        ):
            raise InvalidInput(reason=f"{owner}: pci_devices must be a tuple of PciDeviceSpec")
        addresses = [dev.address for dev in self.pci_devices]
        if len(set(addresses)) != len(addresses):
            raise InvalidInput(reason=f"{owner}: duplicate PCI address in {addresses}")
        _require_rate(owner, "spawn_failure_rate", self.spawn_failure_rate)
        delay = self.spawn_delay_s
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 600:
            raise InvalidInput(reason=f"{owner}: spawn_delay_s must be 0 to 600 s, not {delay!r}")


def quadro_m4000(address: str, numa_node: int | None = None) -> PciDeviceSpec:
    """An NVIDIA Quadro M4000 GPU at ``address``."""
    return PciDeviceSpec(
        address=address,
        vendor_id=NVIDIA_VENDOR_ID,
        product_id=QUADRO_M4000_PRODUCT_ID,
        numa_node=numa_node,
        product_name=QUADRO_M4000_NAME,
    )


def default_profiles(n: int) -> list[HostProfile]:
    """Hosts ``host1``..``hostN`` of 16 vCPUs, 32768 MiB, 500 GiB; host1 has two M4000 GPUs."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidInput(reason=f"number of hosts must be a positive integer, not {n!r}")
    gpus = tuple(quadro_m4000(address) for address in DEFAULT_GPU_ADDRESSES)
    return [
        HostProfile(name=f"host{i}", pci_devices=gpus if i == 1 else ()) for i in range(1, n + 1)
    ]
