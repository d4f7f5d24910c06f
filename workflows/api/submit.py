"""Write, then publish, or take the write back (issue 14, item 4): the one path of every
API request that changes the database and then sends a workflow.

The request commits its write first (enqueue after commit), describing what it wrote in
a ``Written`` record made from the rows as they were; ``publish`` then sends the
workflow (``dispatch.send``, which already retried the broker). If the broker still
fails, the write is taken back in one transaction and ``ServiceUnavailable`` raised: a
failed request leaves nothing behind, and the same call can simply be made again.

The undo is its own write exactly, and never clobbers another's:

- the instance goes back to the columns it had, by compare-and-swap on the task_state
  this request set (a delete or a hard reboot that came in meanwhile keeps its state);
- a migration this request created is deleted while it is still ``pre-migrating`` with
  no destination; one it moved on (confirm, revert) goes back to its status, request and
  time while it is still in the status this request set;
- the request's instance actions go; so do the instances a boot created, with their
  server-group memberships;
- the API itself claims nothing (the scheduler claims, in the transaction that places
  the instance or the move), so an undone request has no claim to release.

A request a worker has already taken over is not undone: its message reached the broker
although the publish reported a failure (the connection dropped after the broker took
it). The signs, each written in the same transaction as the worker's first change: an
event under the request's action (a host step's begin, an unshelve's scheduling), a
booted instance placed (claim and host written together), a move's destination claimed.
The request is then running, so it is returned as accepted rather than refused; a
refusal would invite a retry of a request already under way.

Why a message that reached the broker after all is harmless once its request was taken
back (the instance lock orders the undo and the step's begin, so the undo either sees
the begin's event or the begin sees the undone state):

- boot: the rows are gone; ``scheduler.select_destinations`` skips instances that no
  longer exist (``Scheduler.schedule``), and a claim for one would fail its own
  compare-and-swap and roll back with it, so no claim leaks;
- lifecycle operations, shelve, unshelve, soft delete, restore: each host step begins by
  compare-and-swap on the task_state the API set, now put back: ``skipped``;
  ``trigger_crash_dump`` sets none and is skipped because the request's action is gone
  (``once_per_request``); the unshelve's scheduler step finds the task_state gone;
- resize and migrate: the migration is gone, so ``scheduler.select_for_move`` fails on
  it before claiming anything, and its errback (``abort_move``) finds nothing to undo;
- revert: both steps begin by compare-and-swap on ``resize_reverting``: ``skipped``;
  confirm sets no task_state and is skipped because the request's action is gone;
- delete: the terminate runs whatever the task_state (a delete outranks every other
  operation), so a delete that reached the broker still deletes the server, as its
  caller asked; the caller's retry then finds the server deleting or gone.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celery.canvas import Signature
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from compute.instance_state import cas_update
from compute.states import TaskState
from models import Instance, InstanceAction, InstanceActionEvent, Migration
from models.db import session_scope
from models.server_group import ServerGroupMember
from models.states import MigrationStatus
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from workflows import dispatch
from workflows.api import common

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MigrationWritten:
    """A migration a request wrote: ``status`` is what it set; ``before`` the columns as
    they were (None: the request created the migration)."""

    uuid: str
    status: MigrationStatus
    before: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Written:
    """What one request wrote before its publish: enough to take it back exactly."""

    request_id: str
    instance_uuids: tuple[str, ...]
    #: The task_state this request set: the compare-and-swap key of the undo.
    task_state: str | None = None
    #: The instance's columns as they were (restored by the undo).
    before: Mapping[str, Any] = field(default_factory=dict)
    #: The instances were created by this request (a boot): the undo deletes them.
    created: bool = False
    migration: MigrationWritten | None = None


def columns(row: Any, *names: str) -> dict[str, Any]:
    """``names`` of ``row`` (and its ``updated_at``) as they are now: read before the
    write, they are what the undo puts back."""
    return {name: copy.deepcopy(getattr(row, name)) for name in (*names, "updated_at")}


def publish(
    signature: Signature, written: Written, recorded: dispatch.Recorded | None = None
) -> None:
    """Send ``signature``; if that fails, take ``written`` back and re-raise (normally
    ``ServiceUnavailable``), unless a worker has already taken the request over.
    ``recorded``: the operation's record, written with ``written`` (``dispatch.record``)."""
    try:
        dispatch.send(signature, recorded=recorded)
    except Exception as exc:
        if not take_back(written):
            LOG.warning(
                "Request %s: the publish failed (%s) but a worker already took it over; it stands",
                written.request_id,
                exc,
            )
            return
        LOG.warning("Request %s taken back: the publish failed: %s", written.request_id, exc)
        raise


class _TakenOver(Exception):
    """A worker has the request: the undo's transaction is rolled back."""


def take_back(written: Written) -> bool:
    """Undo ``written`` in one transaction; False (nothing changed) when a worker has
    already taken the request over."""
    try:
        with session_scope(common.db_url()) as session:
            if written.created:
                _drop_created(session, written)
            else:
                _restore(session, written)
    except _TakenOver:
        return False
    return True


def _restore(session: Session, written: Written) -> None:
    # NOTE: the instance row is locked first, as a step's begin locks it before opening
    # its event: the two are ordered (and cannot deadlock on the action row).
    [uuid] = written.instance_uuids
    locked = session.scalars(
        select(Instance.id).where(Instance.uuid == uuid).with_for_update()
    ).first()
    if _began(session, written):
        raise _TakenOver
    if locked is not None:
        try:
            cas_update(session, uuid, expected_task_state=[written.task_state], **written.before)
        except (UnexpectedTaskStateError, InstanceNotFound) as exc:
            LOG.info("Request %s: instance state left as is: %s", written.request_id, exc)
    if written.migration is not None:
        _restore_migration(session, written.migration, written.request_id)
    _drop_actions(session, written)


def _began(session: Session, written: Written) -> bool:
    """Whether a worker opened an event under the request's action (action rows locked,
    so an event being added meanwhile is waited for)."""
    actions = list(
        session.scalars(
            select(InstanceAction.id)
            .where(
                InstanceAction.instance_uuid.in_(written.instance_uuids),
                InstanceAction.request_id == written.request_id,
            )
            .with_for_update()
        )
    )
    if not actions:
        return False
    events = session.scalar(
        select(func.count())
        .select_from(InstanceActionEvent)
        .where(InstanceActionEvent.action_id.in_(actions))
    )
    return bool(events)


def _restore_migration(session: Session, written: MigrationWritten, request_id: str) -> None:
    migration = session.scalars(
        select(Migration).where(Migration.uuid == written.uuid).with_for_update()
    ).first()
    if migration is None:
        return
    if written.before is None:
        if migration.dest_compute is not None:
            raise _TakenOver  # the scheduler claimed the destination
        if migration.status == written.status:
            session.delete(migration)
        return
    if migration.status == written.status and migration.request_id == request_id:
        for name, value in written.before.items():
            setattr(migration, name, value)


def _drop_created(session: Session, written: Written) -> None:
    """A boot's instances, while none of them is placed: deleted, with their actions and
    server-group memberships. One deleted meanwhile (by its owner) stays deleted."""
    dropped = []
    for uuid in written.instance_uuids:
        instance = session.scalars(
            select(Instance).where(Instance.uuid == uuid).with_for_update()
        ).first()
        if instance is None or instance.deleted:
            continue
        if instance.host is not None or instance.task_state != TaskState.SCHEDULING:
            raise _TakenOver  # the scheduler placed it (claim and host in one transaction)
        session.delete(instance)
        dropped.append(uuid)
    session.flush()
    session.execute(delete(ServerGroupMember).where(ServerGroupMember.instance_uuid.in_(dropped)))
    _drop_actions(session, Written(written.request_id, tuple(dropped)))


def _drop_actions(session: Session, written: Written) -> None:
    session.execute(
        delete(InstanceAction).where(
            InstanceAction.instance_uuid.in_(written.instance_uuids),
            InstanceAction.request_id == written.request_id,
        )
    )
