"""The public API for what runs where: a hypervisor's resources, PCI devices and servers
(Nova's ``hypervisor-show`` and ``hypervisor-servers``), and the availability zones with
their hosts and services (``availability-zone-list --long``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from compute.pci import device_dict
from compute.servicegroup import COMPUTE, is_up, service_dict
from compute.states import api_status
from models import ComputeNode, Instance, PciDevice, Service
from models.db import session_scope
from novaq.exceptions import InvalidInput, NotFound
from novaq.settings import Settings
from workflows.api import aggregates, common, views
from workflows.api.validation import Name, validated

#: The zone of every service that is not a compute service (Nova's
#: ``internal_service_availability_zone``).
INTERNAL_ZONE = "internal"


class HypervisorNotFound(NotFound):
    msg_fmt = "No hypervisor matching %(hypervisor)s could be found."


def _find_node(session: Session, ref: str) -> ComputeNode:
    """A live compute node by host, hypervisor hostname or uuid; a host with several
    nodes must be named by node."""
    nodes = list(
        session.scalars(
            select(ComputeNode).where(
                or_(
                    ComputeNode.host == ref,
                    ComputeNode.hypervisor_hostname == ref,
                    ComputeNode.uuid == ref,
                ),
                ComputeNode.deleted == 0,
            )
        )
    )
    if not nodes:
        raise HypervisorNotFound(hypervisor=ref)
    if len(nodes) > 1:
        names = ", ".join(sorted(n.hypervisor_hostname for n in nodes))
        raise InvalidInput(reason=f"{ref!r} has several hypervisors ({names}); name one")
    return nodes[0]


def _servers_on(session: Session, node: ComputeNode) -> list[dict[str, Any]]:
    rows = session.scalars(
        select(Instance)
        .where(Instance.host == node.host, Instance.deleted == 0)
        .where(or_(Instance.node == node.hypervisor_hostname, Instance.node.is_(None)))
        .order_by(Instance.created_at, Instance.id)
    )
    return [
        {
            "uuid": i.uuid,
            "name": i.display_name,
            "status": api_status(i.vm_state, i.task_state),
            "task_state": i.task_state,
            "flavor": i.flavor.name,
            "host": node.host,
            "node": node.hypervisor_hostname,
        }
        for i in rows
    ]


def _service(session: Session, host: str, s: Settings) -> dict[str, Any] | None:
    service = session.scalars(
        select(Service).where(Service.host == host, Service.binary == COMPUTE, Service.deleted == 0)
    ).first()
    return None if service is None else service_dict(service, s)


@validated(labels={"hypervisor": "hypervisor"})
def show_hypervisor(hypervisor: Name) -> dict[str, Any]:
    """A hypervisor by host, node name or uuid: its resources used and total, its
    service's state, its zone and aggregates, its PCI devices with their status and
    owner, and the servers on it."""
    s = common.settings()
    with session_scope(common.db_url(), read_only=True) as session:
        node = _find_node(session, hypervisor)
        service = _service(session, node.host, s)
        view = views.host_dict(node, service)
        view["hypervisor_version"] = node.hypervisor_version
        view["disabled_reason"] = None if service is None else service["disabled_reason"]
        view["forced_down"] = None if service is None else service["forced_down"]
        devices = session.scalars(
            select(PciDevice)
            .where(PciDevice.compute_node_id == node.id, PciDevice.deleted == 0)
            .order_by(PciDevice.address)
        )
        view["pci_devices"] = [
            {**device_dict(d), "instance_uuid": d.instance_uuid} for d in devices
        ]
        view["servers"] = _servers_on(session, node)
        view["availability_zone"] = aggregates.host_zone(session, node.host, s)
        view["aggregates"] = aggregates.host_aggregate_names(session, node.host)
        return view


@validated(labels={"hypervisor": "hypervisor"})
def list_hypervisor_servers(hypervisor: Name) -> list[dict[str, Any]]:
    """The live servers on a hypervisor (by host, node name or uuid)."""
    with session_scope(common.db_url(), read_only=True) as session:
        return _servers_on(session, _find_node(session, hypervisor))


@validated()
def list_availability_zones() -> list[dict[str, Any]]:
    """Every zone, as Nova's verbose listing: a zone with an enabled service is
    available and lists its hosts and their enabled services (up or not, since when);
    a zone with only disabled services is not available. Compute hosts are in their
    aggregate's zone or the default one; other services in ``internal``."""
    s = common.settings()
    with session_scope(common.db_url(), read_only=True) as session:
        services = list(
            session.scalars(
                select(Service).where(Service.deleted == 0).order_by(Service.host, Service.binary)
            )
        )
        zones = {
            sv.id: aggregates.host_zone(session, sv.host, s)
            if sv.binary == COMPUTE
            else INTERNAL_ZONE
            for sv in services
        }
        available = sorted({zones[sv.id] for sv in services if not sv.disabled})
        listed = [
            _zone(name, [sv for sv in services if zones[sv.id] == name], s) for name in available
        ]
        unavailable = sorted({zones[sv.id] for sv in services} - set(available))
        listed += [{"name": name, "available": False, "hosts": None} for name in unavailable]
        return listed


def _zone(name: str, services: list[Service], s: Settings) -> dict[str, Any]:
    hosts: dict[str, dict[str, Any]] = {}
    for sv in services:
        if sv.disabled:
            continue  # Nova lists a zone's enabled services only
        hosts.setdefault(sv.host, {})[sv.binary] = {
            "available": is_up(sv, s),
            "active": True,
            "updated_at": (sv.last_seen_up or sv.updated_at or sv.created_at).isoformat(),
        }
    return {"name": name, "available": True, "hosts": hosts}


__all__ = ["list_availability_zones", "list_hypervisor_servers", "show_hypervisor"]
