"""The per-node workload stats Nova's resource tracker keeps (``nova/compute/stats.py``),
as a pure function of the node's instances: what ComputeCapabilitiesFilter (and any
filter reading ``host.stats``) sees under Nova's names.

For a node's live instances: ``num_instances``; ``num_vm_<vm_state>``,
``num_task_<task_state>`` (``num_task_None`` for none), ``num_os_type_<os_type>``
(``num_os_type_None``) and ``num_proj_<project_id>``, one key for each value some
instance has; ``io_workload``, the instances building or in an I/O-heavy task. A node
with no instance has none of these keys, and every node has ``failed_builds``.

NOTE: these are the stats as Nova's ``update_available_resource`` leaves them (it clears
and recounts every period), which is what Nova's scheduler sees most of the time. Between
two periods Nova's own counts keep a key at 0 once its last instance left that state
(``num_vm_building: 0`` after a build); novaq, which counts the database at decision
time, never shows those zero keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Task states that count as an I/O operation in flight (Nova's ``io_workload``),
#: besides building.
IO_TASK_STATES = (
    "resize_migrating",
    "rebuilding",
    "resize_prep",
    "image_snapshot",
    "image_backup",
    "rescuing",
    "unshelving",
)

#: The keys counted from the instances: whole names, and the prefixes of the others.
INSTANCE_STAT_NAMES = frozenset({"num_instances", "io_workload"})
INSTANCE_STAT_PREFIXES = ("num_vm_", "num_task_", "num_os_type_", "num_proj_")

#: (vm_state, task_state, os_type, project_id, how many instances): one group of a
#: node's live instances.
InstanceGroupRow = tuple[Any, Any, Any, Any, int]


def is_instance_stat(name: str) -> bool:
    """Whether ``name`` is a stats key counted from the instances."""
    return name in INSTANCE_STAT_NAMES or name.startswith(INSTANCE_STAT_PREFIXES)


def io_weight(vm_state: object, task_state: object) -> int:
    """What one instance adds to ``io_workload``.

    NOTE: Nova's is a sum of counters (``num_vm_building`` plus each I/O task state's),
    so an instance building in an I/O task counts twice; so here."""
    return (vm_state == "building") + (task_state in IO_TASK_STATES)


def instance_stats(groups: Iterable[InstanceGroupRow]) -> dict[str, int]:
    """The instance-derived stats of one node from its live instances, grouped."""
    stats: dict[str, int] = {}
    io_workload = 0
    for vm_state, task_state, os_type, project_id, count in groups:
        if not count:
            continue
        for key in (
            "num_instances",
            f"num_vm_{vm_state}",
            f"num_task_{task_state}",
            f"num_os_type_{os_type}",
            f"num_proj_{project_id}",
        ):
            stats[key] = stats.get(key, 0) + count
        io_workload += count * io_weight(vm_state, task_state)
    if stats:
        stats["io_workload"] = io_workload
    return stats
