"""libvirt XML objects for what a real guest needs besides its disks: the CPU model,
the clock and its timers, a logged serial port and the memory balloon.

Same rules as ``virt.libvirt.config``: one class per element, fixed child order, no
policy (``designer`` decides which a guest gets), no libvirt calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from lxml import etree

from virt.libvirt.config_base import LibvirtConfigObject, _attr, _leaf


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestCPU(LibvirtConfigObject):
    """``<cpu>``: the mode (``host-model``, ``host-passthrough``, ``custom``), and for
    ``custom`` the model, matched exactly with no fallback (as Nova writes it)."""

    root_name: ClassVar[str] = "cpu"

    mode: str
    model: str | None = None
    match: str | None = None

    def to_element(self) -> etree._Element:
        cpu = etree.Element(self.root_name, mode=self.mode)
        if self.match is not None:
            cpu.set("match", self.match)
        if self.model is not None:
            _leaf(cpu, "model", self.model, fallback="forbid")
        return cpu

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        return cls(
            mode=element.get("mode", "custom"),
            model=element.findtext("model"),
            match=element.get("match"),
        )


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestTimer(LibvirtConfigObject):
    """``<timer>`` of the clock: ``present`` None leaves libvirt's default."""

    root_name: ClassVar[str] = "timer"

    name: str
    tickpolicy: str | None = None
    present: bool | None = None

    def to_element(self) -> etree._Element:
        timer = etree.Element(self.root_name, name=self.name)
        if self.tickpolicy is not None:
            timer.set("tickpolicy", self.tickpolicy)
        if self.present is not None:
            timer.set("present", "yes" if self.present else "no")
        return timer

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        present = element.get("present")
        return cls(
            name=_attr(element, "name"),
            tickpolicy=element.get("tickpolicy"),
            present=None if present is None else present == "yes",
        )


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestClock(LibvirtConfigObject):
    """``<clock>``: the offset of the guest's clock and its timers, in order."""

    root_name: ClassVar[str] = "clock"

    offset: str = "utc"
    timers: tuple[LibvirtConfigGuestTimer, ...] = ()

    def to_element(self) -> etree._Element:
        clock = etree.Element(self.root_name, offset=self.offset)
        for timer in self.timers:
            clock.append(timer.to_element())
        return clock

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        return cls(
            offset=_attr(element, "offset"),
            timers=tuple(LibvirtConfigGuestTimer.from_element(t) for t in element.findall("timer")),
        )


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestSerial(LibvirtConfigObject):
    """``<serial>`` on a character device, its output copied to ``log_file`` when given
    (libvirt's ``<log>``, written by virtlogd; ``append`` off starts it afresh per boot)."""

    root_name: ClassVar[str] = "serial"

    type: str = "pty"
    log_file: str | None = None
    log_append: bool = False
    target_port: int = 0

    def to_element(self) -> etree._Element:
        serial = etree.Element(self.root_name, type=self.type)
        if self.log_file is not None:
            append = "on" if self.log_append else "off"
            etree.SubElement(serial, "log", file=self.log_file, append=append)
        etree.SubElement(serial, "target", port=str(self.target_port))
        return serial

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        log = element.find("log")
        target = element.find("target")
        return cls(
            type=_attr(element, "type"),
            log_file=log.get("file") if log is not None else None,
            log_append=log is not None and log.get("append") == "on",
            target_port=int(target.get("port", "0")) if target is not None else 0,
        )


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestMemBalloon(LibvirtConfigObject):
    """``<memballoon>``: the balloon device and its statistics period in seconds (0: none)."""

    root_name: ClassVar[str] = "memballoon"

    model: str = "virtio"
    period_s: int = 0

    def to_element(self) -> etree._Element:
        balloon = etree.Element(self.root_name, model=self.model)
        if self.period_s:
            etree.SubElement(balloon, "stats", period=str(self.period_s))
        return balloon

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        stats = element.find("stats")
        return cls(
            model=_attr(element, "model"),
            period_s=int(stats.get("period", "0")) if stats is not None else 0,
        )
