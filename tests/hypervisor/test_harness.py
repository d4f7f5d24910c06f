"""The tier's own footing, with plain libvirt-python and no novaq: the test image boots on
this libvirtd to its marker with the CPUs and disk it was given, and an ACPI power-button
press shuts it down cleanly (NOVAQ-SHUTDOWN on its console)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from tests.hypervisor.conftest import VIRT_TYPE
from tests.hypervisor.guest import (
    URI,
    GiB,
    find_domain,
    read_text,
    wait_new_boot,
    wait_tick_after,
    wait_until,
)

pytestmark = pytest.mark.hypervisor


def _domain_xml(name: str, disk: Path, console: Path) -> str:
    return f"""
<domain type='{VIRT_TYPE}'>
  <name>{name}</name>
  <memory unit='MiB'>192</memory>
  <vcpu>2</vcpu>
  <os><type arch='x86_64'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='{disk}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='file'><source path='{console}' append='on'/></serial>
  </devices>
</domain>"""


@pytest.fixture
def guest_files(test_image: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    disk = tmp_path / "disk"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(test_image), "-F", "raw",
         str(disk), "1G"],
        check=True,
    )  # fmt: skip
    yield disk, tmp_path / "console.log"


def test_the_test_image_boots_to_its_marker_and_powers_off_on_acpi(
    guest_files: tuple[Path, Path],
) -> None:
    disk, console = guest_files
    name = f"novaq-hv-smoke-{os.getpid()}"
    conn = libvirt.open(URI)
    try:
        domain = conn.createXML(_domain_xml(name, disk, console), 0)  # transient
        boot = wait_new_boot(lambda: read_text(console), (), timeout_s=60)
        assert (boot.cpus, boot.disk_bytes, boot.counter) == (2, GiB, 1)
        assert 150 * 1024 < boot.mem_kb <= 192 * 1024

        wait_tick_after(lambda: read_text(console), boot.boot_id, 0)

        domain.shutdown()  # the ACPI power button
        uuid = domain.UUIDString()
        wait_until("the guest gone after ACPI", lambda: find_domain(conn, uuid) is None, 30)
        assert "NOVAQ-SHUTDOWN" in read_text(console).split(boot.boot_id, 1)[1]
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.lookupByName(name).destroy()
        conn.close()
