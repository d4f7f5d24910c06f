"""Select and claim a host for the unshelve of a SHELVED_OFFLOADED instance (Nova's
conductor ``unshelve_instance``: ``select_destinations`` without alternates).

The request is the instance's own RequestSpec with its current flavor, its forced and
requested hosts reset as Nova's ``reset_forced_destinations`` does. The claim and the
instance's host/node are written in one transaction, guarded by the node's generation
and by the instance still being SHELVED_OFFLOADED/``unshelving`` (a server deleted
meanwhile is not placed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from compute.instance_state import get_instance
from compute.resource_tracker import get_node
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from models import Instance
from scheduler.candidates import load_candidates
from scheduler.groups import load_instance_group
from scheduler.manager import Scheduler
from scheduler.request_spec import RequestSpec, Selection

#: (task_state, vm_state) of an instance placed for its unshelve.
UNSHELVE_PLACING = (TaskState.UNSHELVING, VmState.SHELVED_OFFLOADED)


def unshelve_spec(instance: Instance) -> RequestSpec:
    data: dict[str, Any] = dict(instance.request_spec or {})
    data.update(
        instance_uuid=instance.uuid,
        flavor=instance.flavor,
        num_instances=1,
        force_hosts=(),
        requested_host=None,
        ignore_hosts=(),
        instance_group=None,
    )
    data.setdefault("image", instance.image_ref or "")
    data.setdefault("availability_zone", instance.availability_zone)
    return RequestSpec.from_dict(data)


def select_for_unshelve(
    sessions: Sessions, scheduler: Scheduler, instance_uuid: str
) -> Selection | None:
    """The claimed host for the unshelve, or None when the instance left the unshelve
    meanwhile (deleted). Raises ``NoValidHost``. Idempotent: a redelivered request finds
    the host already claimed and returns it."""
    with sessions(read_only=True) as session:
        instance = get_instance(session, instance_uuid, with_deleted=False)
        if (
            instance.vm_state != VmState.SHELVED_OFFLOADED
            or instance.task_state != TaskState.UNSHELVING
        ):
            return None
        if instance.host is not None and instance.node is not None:
            node = get_node(session, instance.host, instance.node)
            if node is not None:
                return Selection(instance.host, instance.node, node.id, (), instance_uuid)
        spec = unshelve_spec(instance)
        candidates = load_candidates(
            session, scheduler.settings, spec.resources, with_stats=scheduler.needs_stats([spec])
        )
        group = load_instance_group(session, spec.group) if spec.group else None
        scheduler.add_weigher_facts(session, candidates.hosts, [spec])
    spec = dataclasses.replace(spec, instance_group=group)
    ranked = scheduler.rank(candidates.hosts, spec, prefilter=candidates.prefilter)
    host = scheduler.claim_first(sessions, ranked, spec, placing=UNSHELVE_PLACING)
    if host is None:
        return None
    return Selection(host.host, host.nodename, host.compute_node_id, (), instance_uuid)
