"""PCI passthrough: which devices a node offers (``[pci] device_spec``), what a flavor asks
for (``pci_passthrough:alias``, named by ``[pci] alias``), and the claim and release of
devices, in the same transaction as the allocations they belong to.

Device states follow Nova's tracker: ``available`` → (``claimed`` →) ``allocated`` → back
to ``available`` on release; a device the hypervisor no longer reports is ``removed``.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session

from models import PciDevice, utcnow
from models.pci_device import ALLOCATED, AVAILABLE, CLAIMED, REMOVED
from novaq.exceptions import InvalidFlavor, ResourcesUnavailable
from novaq.settings import PciAliasEntry, PciDeviceSpecEntry, Settings
from virt.driver import PciDevice as DiscoveredDevice

LOG = logging.getLogger(__name__)

ALIAS_SPEC = "pci_passthrough:alias"
PF = "type-PF"


@dataclass(frozen=True, slots=True)
class PciRequest:
    """``count`` devices of one alias (vendor and product resolved from ``[pci] alias``).

    ``device_type`` None: any type but ``type-PF`` (an alias that names no type)."""

    alias: str
    count: int
    vendor_id: str
    product_id: str
    device_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PciRequest:
        return cls(**data)

    def matches(self, device: PciDevice) -> bool:
        return (
            device.vendor_id == self.vendor_id
            and device.product_id == self.product_id
            and type_matches(self.device_type, device.dev_type)
        )


def type_matches(wanted: str | None, dev_type: str) -> bool:
    """Whether a device of ``dev_type`` serves a request for ``wanted`` (None: any type
    but a PF, as Nova's PCI stats filter PFs out of requests that do not ask for one)."""
    return dev_type == wanted if wanted else dev_type != PF


def typed_first(requests: Sequence[PciRequest]) -> list[PciRequest]:
    """The requests that name a device type first: one that takes any type but a PF gets
    what they leave, so a node that can serve them all is never refused (scheduler and
    claim take them in this one order)."""
    return sorted(requests, key=lambda request: request.device_type is None)


def parse_alias_spec(value: str, aliases: Sequence[PciAliasEntry]) -> list[PciRequest]:
    """``"name:count[,name:count]"`` → requests, read as Nova reads them: the name is
    stripped (``"a0 :1"`` is ``a0``), the count is a whole number, zero included (``a0:0``
    asks for no device, so it makes no request); an unknown alias, a count that is not a
    whole number or an empty entry is refused (Nova's ``PciRequestAliasNotDefined`` and
    its extra spec pattern ``[^:]+:\\d+``)."""
    by_name = {a.name: a for a in aliases}
    requests = []
    for entry in value.split(","):
        name, sep, count_text = entry.partition(":")
        name = name.strip()
        if not name or not sep:
            raise InvalidFlavor(reason=f"{ALIAS_SPEC}={value!r}: expected NAME:COUNT[,NAME:COUNT]")
        if not re.fullmatch(r"\d+", count_text.strip()):
            raise InvalidFlavor(reason=f"{ALIAS_SPEC}={value!r}: count must be a whole number")
        alias = by_name.get(name)
        if alias is None:
            known = ", ".join(sorted(by_name)) or "none configured"
            raise InvalidFlavor(
                reason=f"{ALIAS_SPEC}: PCI alias {name!r} is not defined in [pci] alias ({known})"
            )
        if int(count_text) == 0:
            continue
        requests.append(
            PciRequest(
                alias=name,
                count=int(count_text),
                vendor_id=alias.vendor_id.lower(),
                product_id=alias.product_id.lower(),
                device_type=alias.device_type,
            )
        )
    return requests


def requests_from_extra_specs(
    extra_specs: Mapping[str, str], settings: Settings
) -> list[PciRequest]:
    value = extra_specs.get(ALIAS_SPEC)
    return parse_alias_spec(value, settings.pci.alias) if value else []


def allowed(device: DiscoveredDevice, specs: Iterable[PciDeviceSpecEntry]) -> bool:
    """Does ``[pci] device_spec`` let this device be passed through? (No spec: none is.)"""
    for spec in specs:
        if spec.vendor_id and spec.vendor_id.lower() != device.vendor_id:
            continue
        if spec.product_id and spec.product_id.lower() != device.product_id:
            continue
        if spec.address and not fnmatch.fnmatch(device.address, spec.address.lower()):
            continue
        return True
    return False


def alias_name(vendor_id: str, product_id: str, settings: Settings) -> str | None:
    for alias in settings.pci.alias:
        if (alias.vendor_id.lower(), alias.product_id.lower()) == (vendor_id, product_id):
            return alias.name
    return None


def sync_devices(
    session: Session, node_id: int, discovered: Sequence[DiscoveredDevice], settings: Settings
) -> list[str]:
    """Make the node's device rows match what the hypervisor reports and the allow-list
    permits: new devices become available, vanished free ones are removed. Returns what
    changed, for the log."""
    wanted = {d.address: d for d in discovered if allowed(d, settings.pci.device_spec)}
    rows = {
        r.address: r
        for r in session.scalars(
            select(PciDevice).where(PciDevice.compute_node_id == node_id, PciDevice.deleted == 0)
        )
    }
    changes = []
    for address, device in wanted.items():
        row = rows.get(address)
        alias = alias_name(device.vendor_id, device.product_id, settings)
        if row is None:
            session.add(
                PciDevice(
                    compute_node_id=node_id,
                    address=address,
                    vendor_id=device.vendor_id,
                    product_id=device.product_id,
                    dev_type=device.dev_type,
                    numa_node=device.numa_node,
                    alias=alias,
                    status=AVAILABLE,
                )
            )
            changes.append(f"added {address}")
        elif row.alias != alias:
            row.alias = alias
    for address, row in rows.items():
        if address in wanted:
            continue
        if row.status == AVAILABLE:
            row.status, row.deleted, row.updated_at = REMOVED, row.id, utcnow()
            changes.append(f"removed {address}")
        else:
            LOG.warning(
                "PCI device %s is gone but still %s by %s", address, row.status, row.instance_uuid
            )
    session.flush()
    return changes


def held_devices(
    session: Session, consumer_uuid: str, node_id: int | None = None
) -> list[PciDevice]:
    query = select(PciDevice).where(*held_by(consumer_uuid, node_id))
    return list(session.scalars(query.order_by(PciDevice.address)))


def held_by(
    consumer_uuid: str | ColumnElement[str], node_id: int | ColumnElement[int] | None = None
) -> list[ColumnElement[bool]]:
    """The conditions on ``pci_devices`` of the devices a consumer holds (on one node)."""
    conditions = [
        PciDevice.consumer_uuid == consumer_uuid,
        PciDevice.status.in_((CLAIMED, ALLOCATED)),
        PciDevice.deleted == 0,
    ]
    if node_id is not None:
        conditions.append(PciDevice.compute_node_id == node_id)
    return conditions


def claim_devices(
    session: Session,
    node_id: int,
    consumer_uuid: str,
    instance_uuid: str,
    requests: Sequence[PciRequest],
    status: str = ALLOCATED,
) -> list[PciDevice]:
    """Take devices for every request from the node's free ones, or raise
    ``ResourcesUnavailable`` (the caller's transaction then rolls everything back)."""
    free = list(
        session.scalars(
            select(PciDevice)
            .where(
                PciDevice.compute_node_id == node_id,
                PciDevice.status == AVAILABLE,
                PciDevice.deleted == 0,
            )
            .order_by(PciDevice.address)
        )
    )
    taken: list[PciDevice] = []
    for request in typed_first(requests):
        matching = [d for d in free if request.matches(d) and d not in taken][: request.count]
        if len(matching) < request.count:
            raise ResourcesUnavailable(
                node=str(node_id),
                reason=f"PCI alias {request.alias} requested {request.count}, {len(matching)} free",
            )
        taken.extend(matching)
    now = utcnow()
    for device in taken:
        device.status, device.updated_at = status, now
        device.consumer_uuid, device.instance_uuid = consumer_uuid, instance_uuid
    session.flush()
    return taken


def release_devices(session: Session, consumer_uuid: str, node_id: int | None = None) -> int:
    """Free every device the consumer holds (on one node or all). Returns how many."""
    query = (
        update(PciDevice)
        .where(PciDevice.consumer_uuid == consumer_uuid, PciDevice.status.in_((CLAIMED, ALLOCATED)))
        .values(
            status=AVAILABLE,
            consumer_uuid=None,
            instance_uuid=None,
            request_id=None,
            updated_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    if node_id is not None:
        query = query.where(PciDevice.compute_node_id == node_id)
    return int(session.execute(query).rowcount)  # type: ignore[attr-defined]


def instance_devices(session: Session, instance_uuid: str) -> list[PciDevice]:
    """Devices owned by the instance, whichever consumer holds them."""
    return list(
        session.scalars(
            select(PciDevice)
            .where(
                PciDevice.instance_uuid == instance_uuid,
                PciDevice.status.in_((CLAIMED, ALLOCATED)),
                PciDevice.deleted == 0,
            )
            .order_by(PciDevice.compute_node_id, PciDevice.address)
        )
    )


def device_dict(device: PciDevice) -> dict[str, Any]:
    return {
        "address": device.address,
        "vendor_id": device.vendor_id,
        "product_id": device.product_id,
        "alias": device.alias,
        "status": device.status,
        "compute_node_id": device.compute_node_id,
    }
