"""``GuestOptions``: the operator's choices for guests that the libvirt driver applies.

One frozen value built by the entry points (``tasks/context.py``) from ``[libvirt]`` and
``[compute]`` settings and handed to ``LibvirtDriver``; the driver and the designer read
nothing else, so tests build it directly. Refuses to read settings itself.

The ``test:///`` rule: libvirt's test driver offers only the domain type ``test``, so on a
``test:`` URI ``virt_type`` is ignored and the guest takes the type the test driver
offers; everything else (CPU mode, features, clock, console, balloon) is applied as on a
real host, so simulated hosts run the same XML policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from novaq.exceptions import ConfigError

VIRT_TYPES: Final = ("kvm", "qemu")
CPU_MODES: Final = ("host-model", "host-passthrough", "custom", "none")


@dataclass(frozen=True, slots=True)
class GuestOptions:
    """``virt_type``, ``cpu_mode`` (None: Nova's default for the virt type),
    ``cpu_models``, ``wait_soft_reboot_seconds`` and ``mem_stats_period_seconds`` are
    ``[libvirt]``'s; ``shutdown_retry_interval_s`` is ``[compute] shutdown_retry_interval``
    (how often a clean shutdown asks the guest again)."""

    virt_type: str = "kvm"
    cpu_mode: str | None = None
    cpu_models: tuple[str, ...] = ()
    wait_soft_reboot_seconds: int = 120
    mem_stats_period_seconds: int = 10
    shutdown_retry_interval_s: int = 10

    def __post_init__(self) -> None:
        if self.virt_type not in VIRT_TYPES:
            raise ConfigError(
                option="[libvirt] virt_type",
                reason=f"{self.virt_type!r} is not one of {', '.join(VIRT_TYPES)}",
            )
        if self.cpu_mode is not None and self.cpu_mode not in CPU_MODES:
            raise ConfigError(
                option="[libvirt] cpu_mode",
                reason=f"{self.cpu_mode!r} is not one of {', '.join(CPU_MODES)}",
            )
        if (self.cpu_mode == "custom") != bool(self.cpu_models):
            raise ConfigError(
                option="[libvirt] cpu_models",
                reason="cpu_models is needed with, and only valid with, cpu_mode custom",
            )
        if self.wait_soft_reboot_seconds < 1 or self.shutdown_retry_interval_s < 1:
            raise ConfigError(
                option="[libvirt] wait_soft_reboot_seconds",
                reason="wait_soft_reboot_seconds and shutdown_retry_interval must be >= 1",
            )
