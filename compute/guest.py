"""The guest an instance is, as the driver is handed it (``GuestSpec``): its name, its
flavor, the registry's record of its image and the PCI devices it holds."""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.orm import Session

from compute.images import image_spec
from models.flavor import FlavorSnapshot
from virt.driver import GuestSpec


class GuestRow(Protocol):
    """What a guest's spec reads of an instance: the ORM ``Instance`` or a step's light
    row (``compute.instance_row.InstanceRow``, the build's)."""

    @property
    def id(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def display_name(self) -> str | None: ...
    @property
    def image_ref(self) -> str | None: ...
    @property
    def flavor(self) -> FlavorSnapshot: ...


def instance_name(instance: GuestRow) -> str:
    """Nova's default ``instance_name_template``: ``instance-%08x``."""
    return f"instance-{instance.id:08x}"


def guest_spec(
    session: Session,
    instance: GuestRow,
    pci_addresses: tuple[str, ...] = (),
    flavor: FlavorSnapshot | None = None,
) -> GuestSpec:
    """The guest of ``instance`` with ``flavor`` (default: the instance's own), booting
    from the registry's record of its image (``ImageNotFound`` if it was purged)."""
    flavor = flavor if flavor is not None else instance.flavor
    return GuestSpec(
        uuid=instance.uuid,
        name=instance_name(instance),
        vcpus=flavor.vcpus,
        memory_mb=flavor.memory_mb,
        root_gb=flavor.root_gb,
        ephemeral_gb=flavor.ephemeral_gb,
        swap_mb=flavor.swap,
        image=image_spec(session, instance.image_ref) if instance.image_ref else None,
        pci_addresses=pci_addresses,
        # The domain's <metadata> names the server and its flavor, as Nova's does.
        display_name=instance.display_name or "",
        flavor_name=flavor.name,
    )
