"""The libvirt connection of this process: the ONLY module that imports ``libvirt``.

Owns opening and keeping one connection per ``Host`` (lazily, under a lock,
reopened in a forked child), silencing libvirt's default error printer, and
translating ``libvirt.libvirtError`` into ``novaq.exceptions`` at this boundary
(``DomainNotFound`` for ``VIR_ERR_NO_DOMAIN``, ``HypervisorError`` otherwise,
always ``raise ... from exc``). Reads host facts: node info, capabilities, PCI
node devices, local disk. Runs libvirt's event loop: ``start_event_loop`` registers the
default event implementation and a daemon thread running it, once per process, before
the first connection opens (a remote connection delivers events, and keeps alive, only
when opened after that), and ``Host.register_lifecycle_callback`` subscribes to domain
lifecycle events. Refuses policy: it does not build guest XML or decide what a power
operation or an event means (see ``designer``, ``driver`` and ``events``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import libvirt  # no stubs ship with libvirt-python: ignore_missing_imports in pyproject

from novaq.exceptions import DomainNotFound, HypervisorError
from virt.driver import GuestUsage

LOG = logging.getLogger(__name__)

# The pool the driver reads local disk from, and the volume that stands for the
# whole disk on libvirt's test driver (which pins every pool's capacity at 100 GiB).
LOCAL_DISK_POOL: Final = "default"
LOCAL_DISK_VOLUME: Final = "novaq-local-disk"

UNDEFINE_FLAGS: Final = (
    libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
)
# Codes meaning "this driver cannot do that" rather than "that failed".
UNSUPPORTED_CODES: Final = frozenset(
    (libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_ERR_INVALID_ARG, libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED)
)
_NOT_FOUND_STORAGE: Final = (libvirt.VIR_ERR_NO_STORAGE_POOL, libvirt.VIR_ERR_NO_STORAGE_VOL)

_handler_lock = threading.Lock()
_handler_registered = False
_event_loop_lock = threading.Lock()
_event_impl_registered = False
_event_loop_pid: int | None = None

#: ``callback(uuid, libvirt event, libvirt detail)`` of a domain lifecycle event.
LifecycleCallback = Callable[[str, int, int], None]


def _ignore_libvirt_error(_ctx: object, _error: object) -> None:
    """libvirt prints every error to stderr unless a handler is set; ours are raised instead."""


def _register_error_handler() -> None:
    global _handler_registered
    with _handler_lock:
        if not _handler_registered:
            libvirt.registerErrorHandler(_ignore_libvirt_error, None)
            _handler_registered = True


def start_event_loop() -> None:
    """libvirt's default event loop, running in a daemon thread of this process (again in
    a forked child, whose parent's thread did not survive the fork). Idempotent."""
    global _event_impl_registered, _event_loop_pid
    with _event_loop_lock:
        if _event_loop_pid == os.getpid():
            return
        if not _event_impl_registered:
            libvirt.virEventRegisterDefaultImpl()
            _event_impl_registered = True
        thread = threading.Thread(target=_run_event_loop, name="libvirt-events", daemon=True)
        thread.start()
        _event_loop_pid = os.getpid()


def _run_event_loop() -> None:
    while True:
        try:
            libvirt.virEventRunDefaultImpl()
        except libvirt.libvirtError as exc:  # one bad iteration must not stop the loop
            LOG.warning("libvirt event loop: %s", exc)


@contextlib.contextmanager
def translate_errors(action: str, uuid: str | None = None) -> Iterator[None]:
    """Turn a ``libvirtError`` raised inside into a novaq error naming ``action``."""
    try:
        yield
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            raise DomainNotFound(name=uuid or "?") from exc
        raise HypervisorError(reason=f"{action} failed: {exc.get_error_message()}") from exc


def error_code(exc: BaseException) -> int | None:
    """The libvirt error code behind a translated error, if there is one."""
    cause = exc.__cause__
    return cause.get_error_code() if isinstance(cause, libvirt.libvirtError) else None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """``virNodeGetInfo``: memory in MiB, CPU frequency in MHz."""

    model: str
    memory_mb: int
    cpus: int
    mhz: int
    nodes: int
    sockets: int
    cores: int
    threads: int


class Host:
    """One lazily opened libvirt connection to ``uri``, shared by the threads of a process."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._lock = threading.Lock()
        self._conn: Any = None
        self._pid: int | None = None

    def get_connection(self) -> Any:
        """The open ``virConnect``; opened on first use and again in a forked child."""
        with self._lock:
            if self._conn is None or self._pid != os.getpid():
                self._conn = self._open()
                self._pid = os.getpid()
            return self._conn

    def _open(self) -> Any:
        _register_error_handler()
        start_event_loop()
        LOG.debug("opening libvirt connection to %s", self.uri)
        with translate_errors(f"connecting to {self.uri}"):
            return libvirt.open(self.uri)

    def close(self) -> None:
        """Close the connection (a ``test:///`` hypervisor forgets its guests)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                with translate_errors("closing the connection"):
                    conn.close()

    def register_lifecycle_callback(self, callback: LifecycleCallback) -> int:
        """Call ``callback(uuid, event, detail)`` on the event loop's thread for every
        domain lifecycle event of this connection; returns the id to deregister with."""

        def on_event(_conn: Any, domain: Any, event: int, detail: int, _opaque: Any) -> None:
            callback(str(domain.UUIDString()), int(event), int(detail))

        conn = self.get_connection()
        with translate_errors("registering for domain lifecycle events"):
            return int(
                conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, on_event, None
                )
            )

    def deregister_callback(self, callback_id: int) -> None:
        """Stop a ``register_lifecycle_callback`` subscription (none once closed)."""
        with self._lock:
            conn = self._conn if self._pid == os.getpid() else None
        if conn is not None:
            with translate_errors("deregistering domain events"):
                conn.domainEventDeregisterAny(callback_id)

    def lookup_domain(self, uuid: str) -> Any:
        """The ``virDomain`` with ``uuid``; raises ``DomainNotFound``."""
        conn = self.get_connection()
        with translate_errors("looking up the domain", uuid):
            return conn.lookupByUUIDString(uuid)

    def list_domains(self) -> list[Any]:
        """Every ``virDomain``, running or not."""
        conn = self.get_connection()
        with translate_errors("listing domains"):
            return list(conn.listAllDomains(0))

    def list_guest_usage(self) -> list[GuestUsage]:
        """Every domain's uuid, vCPUs and maximum memory, from ``virDomainGetInfo`` (no
        XML read: the floor of what listing the guests costs). A domain undefined between
        the listing and its read is left out."""
        conn = self.get_connection()
        with translate_errors("listing domains"):
            domains = conn.listAllDomains(0)
        sizes = []
        for domain in domains:
            try:
                _state, max_mem_kib, _mem_kib, vcpus, _cpu_time = domain.info()
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    continue
                raise HypervisorError(reason=f"reading domain info failed: {exc}") from exc
            sizes.append(GuestUsage(domain.UUIDString(), vcpus, max_mem_kib // 1024))
        return sizes

    def define_domain(self, xml: str) -> Any:
        """Define (persistently, not start) a domain from its XML; return the ``virDomain``."""
        conn = self.get_connection()
        with translate_errors("defining the domain"):
            return conn.defineXML(xml)

    def get_capabilities_xml(self) -> str:
        conn = self.get_connection()
        with translate_errors("reading capabilities"):
            return str(conn.getCapabilities())

    def get_node_info(self) -> NodeInfo:
        conn = self.get_connection()
        with translate_errors("reading node info"):
            model, memory_mb, cpus, mhz, nodes, sockets, cores, threads = conn.getInfo()
        return NodeInfo(model, memory_mb, cpus, mhz, nodes, sockets, cores, threads)

    def get_cpu_stats(self) -> dict[str, int]:
        """``virNodeGetCPUStats`` summed over all CPUs: nanoseconds by mode (``user``,
        ``kernel``, ``idle``, ``iowait``; what the platform reports)."""
        conn = self.get_connection()
        with translate_errors("reading the host's CPU statistics"):
            stats = conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0)
        return {str(key): int(value) for key, value in stats.items()}

    def running_vcpus(self) -> int:
        """vCPUs of the domains that are running now (not paused or shut off)."""
        total = 0
        for domain in self.list_domains():
            try:
                state, _max_mem_kib, _mem_kib, vcpus, _cpu_time = domain.info()
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    continue  # undefined since the listing
                raise HypervisorError(reason=f"reading domain info failed: {exc}") from exc
            if state == libvirt.VIR_DOMAIN_RUNNING:
                total += vcpus
        return total

    def get_hostname(self) -> str:
        conn = self.get_connection()
        with translate_errors("reading the hostname"):
            return str(conn.getHostname())

    def get_version(self) -> int:
        """The hypervisor's version, encoded as major * 1,000,000 + minor * 1000 + micro."""
        conn = self.get_connection()
        with translate_errors("reading the hypervisor version"):
            return int(conn.getVersion())

    def get_type(self) -> str:
        """The hypervisor's name (``QEMU``, ``TEST``)."""
        conn = self.get_connection()
        with translate_errors("reading the hypervisor type"):
            return str(conn.getType())

    def list_pci_device_xmls(self) -> list[str]:
        """The node device XML of every host PCI device."""
        conn = self.get_connection()
        with translate_errors("listing PCI node devices"):
            devices = conn.listAllDevices(libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV)
            return [str(device.XMLDesc(0)) for device in devices]

    def get_local_disk_bytes(self) -> int | None:
        """Capacity of the ``default`` pool (or of its whole-disk volume); None without one."""
        conn = self.get_connection()
        pool = _lookup_storage(conn.storagePoolLookupByName, LOCAL_DISK_POOL)
        if pool is None:
            return None
        volume = _lookup_storage(pool.storageVolLookupByName, LOCAL_DISK_VOLUME)
        with translate_errors(f"reading the capacity of pool {LOCAL_DISK_POOL}"):
            capacity = int((volume or pool).info()[1])
        return capacity or None


def _lookup_storage(lookup: Callable[[str], Any], name: str) -> Any | None:
    """A storage pool or volume by name, or None when libvirt has none of that name."""
    try:
        return lookup(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() in _NOT_FOUND_STORAGE:
            return None
        raise HypervisorError(reason=f"looking up storage {name}: {exc}") from exc
