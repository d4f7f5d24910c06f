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
import logging
from typing import Any

from sqlalchemy.orm import Session

from compute.claims import claim_in_session, retry_on_conflict
from compute.instance_state import cas_update, get_instance
from compute.resource_tracker import get_node
from compute.states import TaskState, VmState
from models import Instance
from models.db import session_scope
from novaq.exceptions import (
    InstanceNotFound,
    NoValidHost,
    ResourcesUnavailable,
    UnexpectedTaskStateError,
)
from scheduler.groups import load_instance_group
from scheduler.host_state import HostState, load_candidates
from scheduler.manager import Scheduler, check_group_policy
from scheduler.request_spec import RequestSpec, Selection

LOG = logging.getLogger(__name__)


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


def select_for_unshelve(db_url: str, scheduler: Scheduler, instance_uuid: str) -> Selection | None:
    """The claimed host for the unshelve, or None when the instance left the unshelve
    meanwhile (deleted). Raises ``NoValidHost``. Idempotent: a redelivered request finds
    the host already claimed and returns it."""
    with session_scope(db_url) as session:
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
        candidates = load_candidates(session, scheduler.settings, spec.resources)
        group = load_instance_group(session, spec.group) if spec.group else None
    spec = dataclasses.replace(spec, instance_group=group)
    ranked = scheduler.rank(candidates.hosts, spec, prefilter=candidates.prefilter)
    lost = []
    for host in ranked:
        try:
            retry_on_conflict(db_url, lambda s, h=host: _claim(s, h, spec))
        except ResourcesUnavailable as exc:
            LOG.info("Instance %s: unshelve claim on %s failed: %s", instance_uuid, host.host, exc)
            lost.append(f"{host.host}: {exc}")
            continue
        except (UnexpectedTaskStateError, InstanceNotFound) as exc:
            LOG.info("Instance %s left unshelving: %s", instance_uuid, exc)
            return None
        LOG.info("Instance %s: unshelve on %s/%s", instance_uuid, host.host, host.nodename)
        return Selection(host.host, host.nodename, host.compute_node_id, (), instance_uuid)
    raise NoValidHost(
        reason="Every host that passed the filters was taken by other claims meanwhile ("
        + "; ".join(lost)
        + ")."
    )


def _claim(session: Session, host: HostState, spec: RequestSpec) -> None:
    claim_in_session(session, host.compute_node_id, spec.instance_uuid, spec.resources)
    if spec.instance_group:
        check_group_policy(session, spec.instance_group, spec.instance_uuid, host.host)
    cas_update(
        session,
        spec.instance_uuid,
        expected_task_state=[TaskState.UNSHELVING],
        expected_vm_state=[VmState.SHELVED_OFFLOADED],
        host=host.host,
        node=host.nodename,
    )
