"""The public API for rebuild (a new image, same host and flavor) and evacuate (a server of
a down host rebuilt elsewhere through the scheduler), with Nova's API rules
(``nova/compute/api.py`` ``rebuild`` and ``evacuate``, ``nova/api/openstack/compute/
evacuate.py``). Servers are named by uuid or by name. Bad input is refused before
anything is written or sent."""

from __future__ import annotations

import uuid as uuid_module
from typing import Any

from sqlalchemy.orm import Session

from compute import images
from compute import instance_actions as actions
from compute.instance_state import get_instance
from compute.rebuild import cas_rebuilding, with_image_metadata, with_image_request
from compute.states import TaskState, VmState
from models import Instance, Migration
from models.db import session_scope
from models.migration import MigrationType
from models.migration_context import MigrationContext
from models.states import MigrationStatus
from novaq.exceptions import ComputeServiceInUse, InstanceInvalidState, InvalidInput
from workflows import dispatch
from workflows import gate as gates
from workflows.api import common, flavors, submit
from workflows.api.submit import MigrationWritten, Written
from workflows.api.validation import Name, validated
from workflows.rebuild import (
    check_rebuild_workflow,
    rebuild_workflow,
    select_evacuation_workflow,
)

__all__ = ["evacuate", "rebuild"]

#: Nova's ``check_instance_state`` of rebuild and evacuate (task_state None).
ALLOW_REBUILD = (VmState.ACTIVE, VmState.STOPPED, VmState.ERROR)


def _check_state(instance: Instance, action: str, check_lock: bool) -> None:
    """Nova's decorators: ``check_instance_lock`` (rebuild only), then vm_state in
    ACTIVE/STOPPED/ERROR, no task in flight, and a server that was launched."""
    state: dict[str, Any] = dict(
        action=action,
        uuid=instance.uuid,
        vm_state=instance.vm_state,
        task_state=instance.task_state,
    )
    if check_lock and gates.is_locked(instance):
        reason = (instance.system_metadata or {}).get("locked_reason")
        raise gates.InstanceIsLocked(reason=f" ({reason})" if reason else "", **state)
    if instance.vm_state not in ALLOW_REBUILD or instance.task_state is not None:
        raise InstanceInvalidState(**state)
    if instance.launched_at is None:
        message = InstanceInvalidState.msg_fmt % state
        raise InstanceInvalidState(message[:-1] + ": it has never been launched.", **state)
    if instance.host is None:
        raise gates.InstanceNotReady(**state)


@validated()
def rebuild(server: Name, image: Name) -> str:
    """Rebuild a server from ``image`` (a name or an id) on its own host, same flavor and
    PCI devices: REBUILD, then ACTIVE (SHUTOFF if it was SHUTOFF; ERROR becomes ACTIVE).
    The image must be active and fit the flavor (min_ram, min_disk, size). Returns the
    request id."""
    with session_scope(common.db_url(), read_only=True) as session:
        uuid = common.resolve_server(session, server)
        instance = get_instance(session, uuid, with_deleted=False)
        _check_state(instance, "rebuild", check_lock=True)
        host = _up_host(session, instance)
        new_image = images.find_image(session, image)
        images.check_bootable(new_image, instance.flavor)
        image_id = new_image.id
    dispatch.check_broker()
    request_id = common.new_request_id()
    with session_scope(common.db_url()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        new_image = images.find_image(session, image_id)
        written = Written(
            request_id,
            (uuid,),
            TaskState.REBUILDING,
            submit.columns(
                instance, "task_state", "image_ref", "os_type", "system_metadata", "request_spec"
            ),
        )
        cas_rebuilding(
            session,
            uuid,
            expected_vm_state=list(ALLOW_REBUILD),
            image_ref=new_image.id,
            # Nova's rebuild takes os_type from the new image too.
            os_type=_os_type(new_image.properties or {}),
            system_metadata=with_image_metadata(instance, new_image),
            request_spec=with_image_request(instance, new_image),
        )
        orig_image_ref = instance.image_ref
        actions.start_action(session, uuid, "rebuild", request_id)
    # Nova runs the scheduler's image filters on the server's host when the image changes.
    changed = orig_image_ref != image_id
    workflow = (
        check_rebuild_workflow(uuid, request_id, orig_image_ref or "")
        if changed
        else rebuild_workflow(uuid, request_id, host)
    )
    submit.publish(workflow, written)
    return request_id


def _os_type(properties: dict[str, Any]) -> str | None:
    value = properties.get("os_type")
    return None if value is None else str(value)


def _up_host(session: Session, instance: Instance) -> str:
    assert instance.host is not None
    if not common.host_is_up(session, instance.host, common.settings()):
        raise gates.InstanceHostDown(action="rebuild", uuid=instance.uuid, host=instance.host)
    return instance.host


@validated()
def evacuate(server: Name, host: Name | None = None) -> str:
    """Evacuate a server whose compute host is down (or forced down): rebuilt from its
    image on a host the scheduler chooses, or on ``host``, which the scheduler still
    checks (Nova ≥ 2.29). Refused while the server's host is up (``ComputeServiceInUse``)
    and for a host that does not exist (``ComputeHostNotFound``). Returns the request id."""
    if host is not None:
        flavors.check_name(host, "host")
    with session_scope(common.db_url(), read_only=True) as session:
        uuid = common.resolve_server(session, server)
        instance = get_instance(session, uuid, with_deleted=False)
        _check_state(instance, "evacuate", check_lock=False)
        source = instance.host
        assert source is not None
        if host is not None:
            common.check_compute_host(session, host)
            if host == source:
                raise InvalidInput(reason="The target host can't be the same one.")
        if common.host_is_up(session, source, common.settings()):
            raise ComputeServiceInUse(host=source)
    # The devices it holds stay its request (the flavor does not change).
    pci = tuple((instance.request_spec or {}).get("pci_requests", ()))
    dispatch.check_broker()
    request_id = common.new_request_id()
    migration_uuid = str(uuid_module.uuid4())
    with session_scope(common.db_url()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        written = Written(
            request_id,
            (uuid,),
            TaskState.REBUILDING,
            submit.columns(instance, "task_state"),
            migration=MigrationWritten(migration_uuid, MigrationStatus.ACCEPTED),
        )
        cas_rebuilding(session, uuid, expected_vm_state=list(ALLOW_REBUILD))
        # Nova's tombstone for the source: its start-up recovery finds the evacuation here.
        session.add(
            Migration(
                uuid=migration_uuid,
                instance_uuid=uuid,
                migration_type=MigrationType.EVACUATION,
                status=MigrationStatus.ACCEPTED,
                source_compute=instance.host,
                source_node=instance.node,
                old_flavor=instance.flavor,
                new_flavor=instance.flavor,
                request_id=request_id,
                context=MigrationContext(
                    request_spec=dict(instance.request_spec or {}, instance_uuid=uuid),
                    old_pci_requests=pci,
                    new_pci_requests=pci,
                    requested_host=host,
                ),
            )
        )
        actions.start_action(session, uuid, "evacuate", request_id)
    submit.publish(select_evacuation_workflow(migration_uuid, uuid, request_id), written)
    return request_id
