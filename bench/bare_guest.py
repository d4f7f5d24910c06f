"""The guest a durable bare app's server may have (``boot_bench --durable-guest``): what a
compute host does for a server at the least, on libvirt's ``test:///default`` driver as
novaq's simulated hosts use it, and nothing of novaq's.

At build: the server's directory with its (empty) disk and console files, then its domain
defined and started; at delete: the domain destroyed and undefined, then its directory
removed. No image, no network, no persisted state: the floor of a guest's work, next to
which novaq's simulated host does more (its own record of each guest, the image's copy).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import libvirt

#: Where the guests' directories go (the bench's state directory; unset: the system's
#: temporary directory).
DIR_ENV = "BENCH_BARE_GUESTS"
_XML = """<domain type='test'>
  <name>bare-{uuid}</name><uuid>{uuid}</uuid>
  <memory unit='MiB'>512</memory><vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'><source file='{disk}'/><target dev='vda' bus='virtio'/></disk>
  </devices>
</domain>"""

_connection: Any = None
_lock = threading.Lock()


def _libvirt() -> Any:
    """This process's connection (libvirt's test driver keeps its domains per process, as
    one compute worker keeps its host's)."""
    global _connection
    with _lock:
        if _connection is None:
            _connection = libvirt.open("test:///default")
        return _connection


def _directory(uuid: str) -> Path:
    return Path(os.environ.get(DIR_ENV) or tempfile.gettempdir()) / "bare-guests" / uuid


def up(uuid: str) -> None:
    """The server's files, then its domain defined and started."""
    directory = _directory(uuid)
    directory.mkdir(parents=True, exist_ok=True)
    disk = directory / "disk"
    disk.write_bytes(b"")
    (directory / "console.log").write_bytes(b"")
    _libvirt().defineXML(_XML.format(uuid=uuid, disk=disk)).create()


def down(uuid: str) -> None:
    """The server's domain destroyed and undefined (one that is gone already is fine),
    then its files removed."""
    try:
        domain = _libvirt().lookupByUUIDString(uuid)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
            raise
    else:
        domain.destroy()
        domain.undefine()
    shutil.rmtree(_directory(uuid), ignore_errors=True)
