"""Checks that what novaq reports (``api.show``) equals what libvirt and the guest report."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt

from tests.hypervisor.guest import Boot, GiB, disk_sources, domain_state, find_domain

#: API status -> (libvirt's state of the domain, novaq's power_state). A suspended guest is
#: managed-saved: shut off with a save image, power state SHUTDOWN as in Nova.
EXPECTED: dict[str, tuple[str, int]] = {
    "ACTIVE": ("running", 1),
    "VERIFY_RESIZE": ("running", 1),
    "RESCUE": ("running", 1),
    "PAUSED": ("paused", 3),
    "SHUTOFF": ("shutoff", 4),
    "SUSPENDED": ("saved", 4),
}


@dataclass(frozen=True, slots=True)
class Layout:
    """Where novaq keeps an instance's files: ``<instances_path>/<host>/<uuid>``."""

    instances: Path

    def instance_dir(self, host: str, uuid: str) -> Path:
        return self.instances / host / uuid

    def root_disk(self, host: str, uuid: str) -> Path:
        return self.instance_dir(host, uuid) / "disk"

    def console_log(self, host: str, uuid: str) -> Path:
        return self.instance_dir(host, uuid) / "console.log"

    def base(self, host: str, image_id: str) -> Path:
        return self.instances / host / "_base" / hashlib.sha1(image_id.encode()).hexdigest()

    def leftovers(self, host: str, uuid: str) -> list[Path]:
        """The instance's directories on ``host`` (``<uuid>`` and Nova's ``<uuid>_resize``)."""
        host_dir = self.instances / host
        return sorted(host_dir.glob(f"{uuid}*")) if host_dir.is_dir() else []


def agree(conn: libvirt.virConnect, layout: Layout, view: dict[str, Any]) -> None:
    """``view`` (``api.show``) matches the domain: state, power state, vCPUs, memory, and
    disks in the instance directory of the host novaq names."""
    uuid, host = view["uuid"], view["host"]
    state, power = EXPECTED[view["status"]]
    assert (domain_state(conn, uuid), view["power_state"]) == (state, power), view
    domain = find_domain(conn, uuid)
    assert domain is not None
    flavor = view["flavor"]
    _, max_kib, _, vcpus, _ = domain.info()
    assert (vcpus, max_kib) == (flavor["vcpus"], flavor["memory_mb"] * 1024), view
    disks = disk_sources(conn, uuid)
    root = str(layout.root_disk(host, uuid))
    if view["status"] == "RESCUE":
        assert disks[1] == root and disks[0] != root, disks
        assert Path(disks[0]).parent == layout.instance_dir(host, uuid), disks
    else:
        assert disks[0] == root, disks


def guest_matches_flavor(boot: Boot, flavor: dict[str, Any]) -> None:
    """The guest sees the flavor's vCPUs, about its memory (the kernel keeps some) and a
    root disk of exactly ``root_gb``."""
    assert boot.cpus == flavor["vcpus"], (boot, flavor)
    assert 0.75 * flavor["memory_mb"] * 1024 < boot.mem_kb <= flavor["memory_mb"] * 1024, boot
    assert boot.disk_bytes == flavor["root_gb"] * GiB, (boot, flavor)


def overlay_of_base(layout: Layout, host: str, uuid: str, image_id: str, root_gb: int) -> None:
    """The root disk is a qcow2 overlay of the host's cached base of the image, sized to the
    flavor's root disk."""
    from tests.hypervisor.guest import qemu_img_chain

    base = layout.base(host, image_id)
    chain = qemu_img_chain(layout.root_disk(host, uuid))
    assert chain[0]["format"] == "qcow2", chain
    assert chain[0]["virtual-size"] == root_gb * GiB, chain
    assert Path(chain[0]["full-backing-filename"]) == base, chain
    assert len(chain) == 2 and Path(chain[1]["filename"]) == base, chain
