"""What the test guest says and what libvirt says about it, read as an outside observer.

The guest (scripts/build-test-image) prints on its serial console, once per boot::

    NOVAQ-GUEST boot_id=<id> cpus=<n> mem_kb=<MemTotal> disk_bytes=<size of /dev/vda>
    NOVAQ-COUNTER <n>       (a counter kept on its disk, one more on every boot)
    NOVAQ-TICK <boot id> <uptime s>   (every 2 s while it runs)
    NOVAQ-SHUTDOWN          (on an ACPI power-button press, before powering off)

A console log may start afresh whenever QEMU starts (libvirt's ``append='off'``), so the
helpers here look for boot ids not seen before rather than counting lines.

Tests read the libvirt side with their own read-only connection, never through novaq's
driver: the point is to compare what novaq reports with what libvirt and the guest say.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import libvirt

MARKER = re.compile(r"NOVAQ-GUEST boot_id=(\S+) cpus=(\d+) mem_kb=(\d+) disk_bytes=(\d+)")
COUNTER = re.compile(r"NOVAQ-COUNTER (\d+)")
TICK = re.compile(r"NOVAQ-TICK (\S+) ([0-9.]+)")
SHUTDOWN = "NOVAQ-SHUTDOWN"
URI = "qemu:///system"
GiB = 1024**3

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Boot:
    """One boot of the guest, as it printed it."""

    boot_id: str
    cpus: int
    mem_kb: int
    disk_bytes: int
    counter: int
    shut_down: bool  # NOVAQ-SHUTDOWN printed after this boot's marker


def boots(console: str) -> list[Boot]:
    """Every complete boot (marker and counter lines) in a console log, oldest first."""
    found: list[Boot] = []
    markers = list(MARKER.finditer(console))
    for index, match in enumerate(markers):
        end = markers[index + 1].start() if index + 1 < len(markers) else len(console)
        rest = console[match.end() : end]
        counter = COUNTER.search(rest)
        if counter is None:
            continue
        boot_id, cpus, mem_kb, disk = match.groups()
        found.append(
            Boot(
                boot_id, int(cpus), int(mem_kb), int(disk), int(counter.group(1)), SHUTDOWN in rest
            )
        )
    return found


def wait_until(what: str, check: Callable[[], T | None], timeout_s: float = 60) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` and the last
    value or error seen."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except (OSError, libvirt.libvirtError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")
        time.sleep(0.3)


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def wait_new_boot(read: Callable[[], str], seen: Collection[str], timeout_s: float = 90) -> Boot:
    """The newest complete boot on the console once its boot id is none of ``seen``."""

    def newest() -> Boot | None:
        found = boots(read())
        return found[-1] if found and found[-1].boot_id not in seen else None

    return wait_until(f"the guest booting anew (seen {len(seen)} boots)", newest, timeout_s)


def uptime(console: str, boot_id: str) -> float:
    """The guest's uptime (s) in its last tick of boot ``boot_id`` (0 if none yet)."""
    return max((float(t) for b, t in TICK.findall(console) if b == boot_id), default=0.0)


def wait_tick_after(
    read: Callable[[], str], boot_id: str, after_s: float, timeout_s: float = 30
) -> float:
    """The uptime of a tick of boot ``boot_id`` later than ``after_s``: that boot runs on."""

    def later() -> float | None:
        seen = uptime(read(), boot_id)
        return seen if seen > after_s else None

    return wait_until(f"boot {boot_id} ticking past {after_s} s", later, timeout_s)


def shut_down_between(console: str, boot_id: str, next_boot_id: str) -> bool:
    """Whether boot ``boot_id`` printed NOVAQ-SHUTDOWN after its last line and before
    boot ``next_boot_id`` began (a clean shutdown, not a destroy)."""
    before_next = console.split(f"boot_id={next_boot_id}")[0]
    last = before_next.rfind(boot_id)
    return last >= 0 and SHUTDOWN in before_next[last:]


def wait_shutdown_line(read: Callable[[], str], boot_id: str, timeout_s: float = 60) -> Boot:
    """The boot ``boot_id`` once it printed NOVAQ-SHUTDOWN."""

    def done() -> Boot | None:
        return next((b for b in boots(read()) if b.boot_id == boot_id and b.shut_down), None)

    return wait_until(f"NOVAQ-SHUTDOWN after boot {boot_id}", done, timeout_s)


class ConsoleRecorder:
    """Everything a console log showed while recording, also what a restarting QEMU wiped
    (``append='off'``): a thread reads the file every 0.1 s, so a NOVAQ-SHUTDOWN printed a
    second before the next boot truncates the file is still seen."""

    def __init__(self, path: Callable[[], Path]) -> None:
        self._path = path
        self._segments: list[str] = [""]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConsoleRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def text(self) -> str:
        with self._lock:
            return "\n".join(self._segments)

    def _run(self) -> None:
        while True:
            current = read_text(self._path())
            with self._lock:
                if not current.startswith(self._segments[-1]):
                    self._segments.append("")  # the file started afresh
                self._segments[-1] = current
            if self._stop.wait(0.1):
                return


# -- libvirt, read-only -------------------------------------------------------------------
def connect() -> libvirt.virConnect:
    return libvirt.openReadOnly(URI)


def find_domain(conn: libvirt.virConnect, uuid: str) -> libvirt.virDomain | None:
    try:
        return conn.lookupByUUIDString(uuid)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise


def domain_state(conn: libvirt.virConnect, uuid: str) -> str:
    """``running``, ``paused``, ``shutoff``, ``saved`` (shut off with a managed save) or
    ``absent``."""
    domain = find_domain(conn, uuid)
    if domain is None:
        return "absent"
    state = domain.state()[0]
    if state == libvirt.VIR_DOMAIN_SHUTOFF and domain.hasManagedSaveImage(0):
        return "saved"
    return {
        libvirt.VIR_DOMAIN_RUNNING: "running",
        libvirt.VIR_DOMAIN_BLOCKED: "running",
        libvirt.VIR_DOMAIN_PAUSED: "paused",
        libvirt.VIR_DOMAIN_SHUTOFF: "shutoff",
        libvirt.VIR_DOMAIN_SHUTDOWN: "shutting-down",
        libvirt.VIR_DOMAIN_CRASHED: "crashed",
    }.get(state, f"state-{state}")


def disk_sources(conn: libvirt.virConnect, uuid: str) -> list[str]:
    """The source files of the domain's disks, in target order (vda, vdb, …)."""
    from lxml import etree

    domain = find_domain(conn, uuid)
    assert domain is not None, f"no domain {uuid}"
    tree = etree.fromstring(domain.XMLDesc(0))
    disks = tree.findall("./devices/disk[@device='disk']")
    disks.sort(key=lambda d: d.find("target").get("dev"))
    return [d.find("source").get("file") for d in disks]


def qemu_img_chain(path: Path) -> list[dict[str, Any]]:
    """``qemu-img info --backing-chain`` of a disk (``-U``: it may be in use by QEMU)."""
    done = subprocess.run(
        ["qemu-img", "info", "-U", "--output=json", "--backing-chain", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    chain = json.loads(done.stdout)
    return chain if isinstance(chain, list) else [chain]
