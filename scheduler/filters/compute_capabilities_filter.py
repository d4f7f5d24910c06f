"""ComputeCapabilitiesFilter: the flavor's extra specs must match what the host reports.

An unscoped key (``hypervisor_type``) is checked only when the host has such an attribute
or ``stats`` key, so unrelated unscoped specs do not reject every host. A
``capabilities:``-scoped key walks host attributes, then ``stats``, then nested dicts (or
JSON strings), e.g. ``capabilities:cpu_info:arch``. Keys in any other scope are ignored.

The attributes are Nova's ``HostState``'s, by Nova's names and with Nova's values
(``NOVA_ATTRIBUTES``), not novaq's own fields: ``total_usable_ram_mb`` is there,
``memory_mb`` and ``availability_zone`` are not (Nova ignores such an unscoped key, so
novaq does), ``cpu_info`` is the JSON text Nova keeps, ``supported_instances`` a list of
lists, ``host_ip`` the address the host reports, compared as Nova's text of it
(``capabilities:host_ip=s== 10.0.0.5``; None, so no capability, before the node records
one). ``stats`` holds the resource tracker's keys (``compute.stats``: ``num_instances``,
``io_workload``, ``num_vm_<state>``, ``num_task_<state>``, ``num_os_type_<type>``,
``num_proj_<project>``, ``failed_builds``), counted from the hosts' instances only for a
request whose specs name such a key (``reads_stats``). Not there: ``metrics`` (read by
MetricsFilter and MetricsWeigher); a spec naming them finds no capability.

Where Nova's filter raises (a numeric operator such as ``>= 4`` against a text capability
such as ``x86_64``: ``ValueError``, which fails the whole request in Nova), novaq's
refuses that host and goes on with the others (``extra_specs_ops.match``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from compute.host_ip import ip_text
from compute.stats import is_instance_stat
from scheduler.filters import extra_specs_ops
from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

SCOPE = "capabilities"

#: Nova's HostState attributes (nova/scheduler/host_manager.py) as novaq's host state
#: holds them.
NOVA_ATTRIBUTES: dict[str, Callable[[HostState], Any]] = {
    "host": lambda h: h.host,
    "nodename": lambda h: h.nodename,
    "hypervisor_hostname": lambda h: h.nodename,
    "host_ip": lambda h: ip_text(h.host_ip),
    "hypervisor_type": lambda h: h.hypervisor_type,
    "hypervisor_version": lambda h: h.hypervisor_version,
    "cpu_info": lambda h: json.dumps(h.cpu_info),
    "supported_instances": lambda h: [list(t) for t in h.supported_instances],
    "total_usable_ram_mb": lambda h: h.memory_mb,
    "free_ram_mb": lambda h: h.free_ram_mb,
    "total_usable_disk_gb": lambda h: h.local_gb,
    "free_disk_mb": lambda h: h.free_disk_mb,
    "disk_mb_used": lambda h: h.local_gb_used * 1024,
    "vcpus_total": lambda h: h.vcpus_total,
    "vcpus_used": lambda h: h.vcpus_used,
    "num_instances": lambda h: h.num_instances,
    "num_io_ops": lambda h: h.num_io_ops,
    "failed_builds": lambda h: h.failed_builds,
    "cpu_allocation_ratio": lambda h: h.cpu_allocation_ratio,
    "ram_allocation_ratio": lambda h: h.ram_allocation_ratio,
    "disk_allocation_ratio": lambda h: h.disk_allocation_ratio,
    "stats": lambda h: h.stats,
}
MAXPHYSADDR_SPEC = "hw:maxphysaddr_bits"
MAXPHYSADDR_CAPABILITY = "capabilities:cpu_info:maxphysaddr:bits"


class ComputeCapabilitiesFilter(BaseFilter):
    run_filter_once_per_request = True

    def ignores(self, spec: RequestSpec) -> bool:
        return not _extra_specs(spec)

    def reads_stats(self, spec: RequestSpec) -> bool:
        return any(_names_instance_stat(key) for key in _extra_specs(spec))

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        for key, req in _extra_specs(spec).items():
            path = _capability_path(host, key)
            if path is None:
                continue
            capability = _lookup(host, path)
            if capability is None:
                LOG.debug("%s: no capability %s for extra spec %s", host.host, path, key)
                return False
            if not extra_specs_ops.match(str(capability), str(req)):
                LOG.debug("%s: extra spec %s=%r does not match %r", host.host, key, req, capability)
                return False
        return True


def _extra_specs(spec: RequestSpec) -> dict[str, Any]:
    specs: dict[str, Any] = dict(spec.flavor.extra_specs)
    # NOTE: Nova rewrites the maxphysaddr spec as a capability requirement.
    bits = specs.pop(MAXPHYSADDR_SPEC, None)
    if bits is not None:
        specs[MAXPHYSADDR_CAPABILITY] = f">= {bits}"
    return specs


def _capability_path(host: HostState, key: str) -> list[str] | None:
    """The attribute path a spec key names, or None when this filter ignores the key."""
    scope = key.split(":")
    if len(scope) == 1:
        return scope if key in NOVA_ATTRIBUTES or key in host.stats else None
    return scope[1:] if scope[0] == SCOPE else None


def _names_instance_stat(key: str) -> bool:
    """Whether a spec key may reach a stats key counted from the instances: unscoped or
    ``capabilities:``-scoped, a name that is no attribute (looked up in ``stats``), or a
    name under ``capabilities:stats:``."""
    scope = key.split(":")
    if len(scope) > 1:
        if scope[0] != SCOPE:
            return False
        scope = scope[1:]
    if scope[0] == "stats" and len(scope) > 1:
        return is_instance_stat(scope[1])
    return scope[0] == "stats" or (scope[0] not in NOVA_ATTRIBUTES and is_instance_stat(scope[0]))


def _lookup(host: HostState, path: list[str]) -> Any:
    capability: Any = host
    for name in path:
        if isinstance(capability, str):
            try:
                capability = json.loads(capability)
            except ValueError:
                return None
        if isinstance(capability, dict):
            capability = capability.get(name)
        elif capability is host:
            attribute = NOVA_ATTRIBUTES.get(name)
            found = attribute(host) if attribute else None
            capability = found if found is not None else host.stats.get(name)
        else:
            return None
        if capability is None:
            return None
    return capability
