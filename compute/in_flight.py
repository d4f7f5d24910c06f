"""The durable record of each operation in flight, and the reaper that finishes or undoes
the operations whose message or owner is gone (DESIGN.md, Durability).

A record (``models.OperationInFlight``, one per instance) holds the message that moves
its operation on next, as a Celery signature in JSON (``{"signature": ..., "chain": ...,
"root_id": ..., "parent_id": ...}``):

- written when the API publishes the operation (``workflows.dispatch.send``);
- replaced as each step starts by the step's own message (with the rest of its chain
  and its error callbacks), in the same transaction as its delivery count (a late copy
  of a step whose operation has ended, its instance with no task_state, writes none);
- replaced as a step ends by its successor in the chain, or removed when it was the last.

The reaper (a cluster periodic task on beat, ``reap_operations_in_flight``) looks at the
records nobody touched for a while:

=======================================  ===========================================
what it finds                            what it does
=======================================  ===========================================
instance deleted, gone, or no longer in  the record is stale: removed
the record's task_state
the step is running (a delivery row)     nothing: a long step on a live worker
and its worker's host is up
the step's worker is gone: a new worker  sent again at once (the step is idempotent:
of the same node started (the delivery   it resumes or is ``skipped``), so a killed
is *orphaned*)                           worker's step does not wait out the broker's
                                         visibility timeout
its host's service is down (no           undone with a fault by the operation's own
heartbeat in ``service_down_time``)      error callback (the errbacks' undo)
no delivery and no progress for          sent again (a message the broker lost); after
``operation_lost_after`` seconds         ``operation_max_resends`` sends, undone
=======================================  ===========================================

Sending again reuses the message's task id, so a copy the broker still held is
recognised (``worker_deduplicate_successful_tasks``) or finds its step done (every step
compare-and-swaps the instance's task_state and is ``skipped`` on a redelivery).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    Delete,
    Update,
    bindparam,
    case,
    delete,
    insert,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from compute.servicegroup import is_up
from compute.sessions import Sessions
from models import Instance, OperationInFlight, Service, TaskDelivery, utcnow
from models.tables import one_or_in, table_of
from novaq.exceptions import NovaqError
from novaq.settings import Settings

LOG = logging.getLogger(__name__)

Message = dict[str, Any]


class OperationLost(NovaqError):
    msg_fmt = "%(task)s did not complete: %(reason)s"


#: The records' table. NOTE: every step's start and end write it, and the API's boot:
#: statements on the table rather than the mapped class are the same SQL without the
#: ORM's bulk-persistence pass (about 70 us each); the ORM's pending writes are flushed
#: before them, as an ORM statement's autoflush did.
_RECORDS: Final = table_of(OperationInFlight)


# -- messages -------------------------------------------------------------------------------


def message_of_signature(signature: dict[str, Any]) -> Message:
    """The record of a workflow as the API publishes it (a frozen signature, as a dict)."""
    return {"signature": signature}


def message_of_request(
    task: str,
    task_id: str,
    kwargs: dict[str, Any],
    chain: list[dict[str, Any]] | None,
    errbacks: list[dict[str, Any]] | None,
    root_id: str | None,
    parent_id: str | None,
) -> Message:
    """The record of a step as it starts (from its Celery request)."""
    options: dict[str, Any] = {"task_id": task_id}
    if errbacks:
        options["link_error"] = list(errbacks)
    return {
        "signature": {
            "task": task,
            "args": [],
            "kwargs": dict(kwargs),
            "options": options,
            "subtask_type": None,
            "immutable": True,
        },
        "chain": list(chain) if chain else None,
        "root_id": root_id,
        "parent_id": parent_id,
    }


def successor_of(
    chain: list[dict[str, Any]] | None, root_id: str | None, task_id: str
) -> Message | None:
    """The record once a step of a chain succeeded: the next step with the rest (Celery
    keeps the rest of a chain last-first, and sends ``chain[-1]`` next)."""
    if not chain:
        return None
    return {
        "signature": dict(chain[-1]),
        "chain": list(chain[:-1]) or None,
        "root_id": root_id,
        "parent_id": task_id,
    }


def first_task(signature: dict[str, Any]) -> dict[str, Any]:
    """The task a signature starts with (a chain's first)."""
    while signature.get("task") == "celery.chain":
        signature = dict(signature["kwargs"]["tasks"][0])
    return signature


def task_id_of(message: Message) -> str | None:
    options = first_task(message.get("signature") or {}).get("options") or {}
    task_id = options.get("task_id")
    return str(task_id) if task_id else None


def instances_of(message: Message) -> list[str]:
    """The instances a message acts on (``instance_uuid`` or a boot's ``instance_uuids``)."""
    kwargs = first_task(message.get("signature") or {}).get("kwargs") or {}
    if kwargs.get("instance_uuid"):
        return [str(kwargs["instance_uuid"])]
    return [str(u) for u in kwargs.get("instance_uuids") or ()]


# -- records --------------------------------------------------------------------------------


def record(
    session: Session,
    message: Message,
    request_id: str = "",
    replacing: bool = False,
    task_states: Mapping[str, str | None] | None = None,
    created: bool = False,
) -> None:
    """Write (or replace) the record of every instance ``message`` acts on, with the
    task_state the instance is in now (the operation's; ``task_states`` when the caller
    has just written it, so it is not read again). Core statements, not the ORM: a
    record another transaction removes meanwhile is simply not updated.

    ``replacing``: the records are most likely there (a step's start: the API or the step
    before wrote them), so one UPDATE replaces them all, and only the instances it missed
    get an INSERT (unless the instance has no task_state: the operation has ended);
    otherwise (the API's publish) each is inserted, replaced if there.
    ``created``: the caller's transaction has just created the instances (a boot), so no
    record of theirs can exist: one plain INSERT writes them all, with ``task_states``."""
    task_id = task_id_of(message)
    kwargs = first_task(message.get("signature") or {}).get("kwargs") or {}
    request_id = request_id or str(kwargs.get("request_id") or "")
    uuids = instances_of(message)
    now = utcnow()
    values = {
        "request_id": request_id,
        "message": message,
        "task_id": task_id,
        "updated_at": now,
        "host_down_since": None,
    }
    if created:
        _insert_created(session, uuids, values, now, task_states or {})
        return
    if replacing and uuids:
        session.flush()  # the ORM's pending writes first, as an ORM statement's autoflush did
        params: dict[str, Any] = {f"r_{key}": value for key, value in values.items()}
        single = len(uuids) == 1
        params["r_uuids"] = uuids[0] if single else uuids
        # (on the connection, as every statement of a delivery: ``compute.step_records``)
        replaced = session.connection().execute(_replace_statement(single), params)
        if replaced.rowcount == len(uuids):
            return
    for uuid in uuids:
        _insert(session, uuid, values, now, task_states, revive=not replacing)


def _insert_created(
    session: Session,
    uuids: list[str],
    values: dict[str, Any],
    now: dt.datetime,
    task_states: Mapping[str, str | None],
) -> None:
    """The records of instances created in the caller's transaction, in one INSERT (no
    savepoint, no fallback UPDATE: nothing else can have written them yet)."""
    if uuids:
        rows = [
            {"instance_uuid": u, "resent": 0, "created_at": now, "task_state": task_states.get(u)}
            | values
            for u in uuids
        ]
        session.flush()
        session.execute(insert(_RECORDS), rows)


#: The columns every write of a record sets (``record``'s ``values``).
_WRITTEN = ("request_id", "message", "task_id", "updated_at", "host_down_since")


@functools.cache
def _replace_statement(single: bool) -> Update:
    """The records of ``:r_uuids`` replaced by a step's start, built once (building it
    cost more than running it, at every step): ``r_<column>`` for each of ``_WRITTEN``,
    the count of sends kept within the request, the instance's task_state read along.

    ``single``: ``:r_uuids`` is one uuid (every step but a multi-server boot's), matched
    with ``=`` (``models.tables.one_or_in``)."""
    columns = _RECORDS.c
    request_id = bindparam("r_request_id", type_=columns.request_id.type)
    return (
        update(_RECORDS)
        .where(one_or_in(columns.instance_uuid, "r_uuids", single))
        .values(
            {name: bindparam(f"r_{name}", type_=columns[name].type) for name in _WRITTEN}
            | {
                "resent": case((columns.request_id == request_id, columns.resent), else_=0),
                "task_state": _task_state_of_record(),
            }
        )
    )


def _resent(request_id: str) -> Any:
    """A record passed on within its operation keeps its count of sends; a new one starts
    at 0."""
    same = _RECORDS.c.request_id == request_id
    return case((same, _RECORDS.c.resent), else_=0)


def _task_state_of_record() -> Any:
    instances = table_of(Instance).c
    return (
        select(instances.task_state)
        .where(instances.uuid == _RECORDS.c.instance_uuid)
        .scalar_subquery()
    )


def _insert(
    session: Session,
    uuid: str,
    values: dict[str, Any],
    now: dt.datetime,
    task_states: Mapping[str, str | None] | None = None,
    revive: bool = True,
) -> None:
    """The record of ``uuid`` (none if the instance is gone), inserted or replaced;
    ``task_states``: the instances' task_states the caller has just written.
    ``revive`` False (a step's start that found no record): none is written for an
    instance with no task_state in flight."""
    if task_states is not None and uuid in task_states:
        task_state = task_states[uuid]
    else:
        instance = session.execute(select(Instance.task_state).where(Instance.uuid == uuid)).first()
        if instance is None:
            return
        task_state = instance.task_state
    if task_state is None and not revive:
        # NOTE: a step starts, its instance has no record and no task in flight: the
        # operation has ended (undone by the reaper while the step's host was down, by an
        # errback) and this is a late copy of one of its messages (the broker's, after the
        # worker that held it died). A record brought back here would name no task_state,
        # so the reaper could never judge it stale: it would send the step again and
        # again (operation_lost_after apart) before undoing an operation already undone.
        return
    row = {"instance_uuid": uuid, "resent": 0, "created_at": now, "task_state": task_state}
    upsert = _upsert(session.get_bind().dialect.name)
    if upsert is not None:
        # NOTE: the caller's ORM writes first (its instance's task_state), as the savepoint
        # flushed them: a step's start also locks the instance before the record, and the
        # same order on PostgreSQL's row locks is what keeps the two from deadlocking.
        session.flush()
        session.execute(upsert, row | values)
        return
    try:
        with session.begin_nested():
            session.execute(insert(OperationInFlight).values(**row, **values))
    except IntegrityError:  # there is one: this operation's (or a former one's)
        session.execute(
            update(OperationInFlight)
            .where(OperationInFlight.instance_uuid == uuid)
            .values(resent=_resent(values["request_id"]), task_state=task_state, **values)
        )


@functools.cache
def _upsert(dialect: str) -> Any:
    """The record's INSERT that replaces one already there (all but ``created_at``, and
    ``resent`` kept within the same request), in one statement where the database has
    ``ON CONFLICT DO UPDATE``; None elsewhere (a savepoint and an UPDATE then). Its
    parameters: every column, named as the column.

    NOTE: the savepoint it replaces costs SAVEPOINT and RELEASE round trips and the ORM's
    nested transaction on every delete; ``excluded`` is the row proposed, the bare
    columns the row there (both databases evaluate SET against the row as it was). As a
    ``text()`` compiled once (as ``compute.deliveries``' count): SQLAlchemy caches no
    compiled form of a dialect's ``on_conflict_do_update``, so it was compiled again at
    every API request that records an operation (about 1 ms)."""
    module: Any = {"sqlite": sqlite, "postgresql": postgresql}.get(dialect)
    if module is None:
        return None
    table = _RECORDS
    params = {c.name: bindparam(c.name, type_=c.type) for c in table.columns}
    proposed = module.insert(table).values(**params)
    kept = ("instance_uuid", "created_at", "resent")
    replaced = {c.name: proposed.excluded[c.name] for c in table.columns if c.name not in kept}
    same_request = table.c.request_id == proposed.excluded.request_id
    replaced["resent"] = case((same_request, table.c.resent), else_=literal_column("0"))
    upsert = proposed.on_conflict_do_update(index_elements=[table.c.instance_uuid], set_=replaced)
    sql = str(upsert.compile(dialect=module.dialect(paramstyle="named")))
    # PostgreSQL's JSON parameter is rendered ``:message::JSON``, which text() does not
    # take for a parameter: the same cast spelled out.
    sql = re.sub(r":(\w+)::(\w+)", r"CAST(:\1 AS \2)", sql)
    return text(sql).bindparams(*params.values())


def step_ended(session: Session, task_id: str, successor: Message | None) -> None:
    """The step ``task_id`` returned: its records pass to ``successor`` or go. Only the
    records this step owns: a step that sent another (a reschedule) has handed over."""
    session.flush()  # the ORM's pending writes first, as an ORM statement's autoflush did
    if successor is None:
        session.connection().execute(_ended_statement(), {"e_task_id": task_id})
        return
    session.connection().execute(
        _passed_statement(),
        {
            "e_task_id": task_id,
            "e_message": successor,
            "e_next_task_id": task_id_of(successor),
            "e_updated_at": utcnow(),
        },
    )


@functools.cache
def _ended_statement() -> Delete:
    """``step_ended``'s removal of the records a last step owned, built once."""
    return delete(_RECORDS).where(_RECORDS.c.task_id == bindparam("e_task_id"))


@functools.cache
def _passed_statement() -> Update:
    """``step_ended``'s hand-over of the records a step owned to its successor."""
    columns = _RECORDS.c
    return (
        update(_RECORDS)
        .where(columns.task_id == bindparam("e_task_id"))
        .values(
            message=bindparam("e_message", type_=columns.message.type),
            task_id=bindparam("e_next_task_id", type_=columns.task_id.type),
            updated_at=bindparam("e_updated_at", type_=columns.updated_at.type),
        )
    )


def forget(session: Session, instance_uuids: list[str], task_id: str | None) -> None:
    """Drop the records a failed publish wrote (the API undoes its write too)."""
    if not instance_uuids:
        return
    session.execute(
        delete(OperationInFlight).where(
            OperationInFlight.instance_uuid.in_(instance_uuids),
            OperationInFlight.task_id == task_id,
        )
    )


def orphan_deliveries(sessions: Sessions, worker: str) -> int:
    """A worker of node ``worker`` has started: whatever deliveries a former worker of
    that node left in flight died with it (a Celery node name is unique while it runs)."""
    with sessions() as session:
        result = session.execute(
            update(TaskDelivery)
            .where(TaskDelivery.worker == worker, TaskDelivery.orphaned_at.is_(None))
            .values(orphaned_at=utcnow())
        )
        return int(getattr(result, "rowcount", 0) or 0)


# -- the reaper -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    action: str  # "stale", "running", "resend", "undo", "wait"
    reason: str = ""


RESEND, UNDO, STALE, RUNNING, WAIT = "resend", "undo", "stale", "running", "wait"
SUSPECT = "suspect"
#: How many report intervals the reaper watches a host look down before it believes it.
HOST_DOWN_CONFIRM_INTERVALS = 2.5


def judge(
    row: OperationInFlight,
    instance: Instance | None,
    delivery: TaskDelivery | None,
    host_up: bool | None,
    settings: Settings,
    now: dt.datetime,
) -> Verdict:
    """What the reaper does with one record (the table of the module's docstring).
    ``host_up``: the step's host's service is up (None: the step has no host, e.g. the
    scheduler's)."""
    if instance is None or instance.deleted:
        return Verdict(STALE, "instance deleted")
    if row.task_state is not None and instance.task_state is None:
        # The operation ended (or was undone) without passing the record on: a failed
        # step whose errback undid it, a last step that could not write its end. (A step
        # moving through its own task_states, spawning, resize_migrating..., is not None.)
        return Verdict(STALE, "the operation ended")
    if delivery is not None and delivery.orphaned_at is not None:
        return Verdict(RESEND, f"its worker {delivery.worker} died and was restarted")
    if host_up is False:
        return _host_down(row, settings, now)
    if delivery is not None and delivery.worker is not None:
        return Verdict(RUNNING)
    idle = (now - row.updated_at).total_seconds()
    if idle < settings.operation_lost_after:
        return Verdict(WAIT)
    if not row.message:
        return Verdict(UNDO, "its next message is not known")
    if row.resent >= settings.operation_max_resends:
        return Verdict(UNDO, f"sent {row.resent} times without progress")
    return Verdict(RESEND, f"no progress for {idle:.0f} s (message lost?)")


def reap(
    sessions: Sessions,
    settings: Settings,
    resend: Callable[[Message], None],
    undo: Callable[[Message, BaseException], None],
    now: dt.datetime | None = None,
) -> dict[str, list[str]]:
    """One pass of the reaper: judge every record, act, and report what was done."""
    now = now or utcnow()
    summary: dict[str, list[str]] = {RESEND: [], UNDO: [], STALE: []}
    with sessions() as session:
        rows = session.scalars(select(OperationInFlight)).all()
        plans = []
        for row in rows:
            instance = _instance(session, row.instance_uuid)
            delivery = (
                session.scalars(
                    select(TaskDelivery).where(TaskDelivery.task_id == row.task_id)
                ).first()
                if row.task_id
                else None
            )
            host = _step_host(row.message) or (delivery.host if delivery else None)
            host_up = _host_up(session, host, settings, now) if host else None
            verdict = judge(row, instance, delivery, host_up, settings, now)
            _watch_host(session, row, verdict, host_up, now)
            plans.append((row.instance_uuid, row.task_id, dict(row.message or {}), verdict))
    sent: set[str | None] = set()
    for uuid, task_id, message, verdict in plans:
        if verdict.action not in (STALE, RESEND, UNDO):
            continue
        try:
            _act(sessions, uuid, task_id, message, verdict, resend, undo, sent)
        except Exception:  # noqa: BLE001 - one record's trouble must not stop the pass
            LOG.exception("Reaping the operation on %s failed; the next pass tries again", uuid)
            continue
        summary[verdict.action].append(uuid)
    return {k: v for k, v in summary.items() if v}


def _act(
    sessions: Sessions,
    uuid: str,
    task_id: str | None,
    message: Message,
    verdict: Verdict,
    resend: Callable[[Message], None],
    undo: Callable[[Message, BaseException], None],
    sent: set[str | None],
) -> None:
    if verdict.action == STALE:
        _drop(sessions, uuid, task_id)
    elif verdict.action == RESEND:
        # Counted before it is sent, so the copy's own start is never mistaken for the
        # dead worker's delivery.
        _bump(sessions, uuid, task_id)
        if task_id not in sent:  # one boot's message covers all its instances
            LOG.warning("Operation on %s: %s; sending its step again", uuid, verdict.reason)
            resend(message)
            sent.add(task_id)
    else:
        task = str(first_task(message.get("signature") or {}).get("task") or "operation")
        LOG.warning("Operation on %s: %s; undoing it", uuid, verdict.reason)
        undo(message, OperationLost(task=task, reason=verdict.reason))
        _drop(sessions, uuid, task_id)


def _host_down(row: OperationInFlight, settings: Settings, now: dt.datetime) -> Verdict:
    """The step's host looks down. Believed once the reaper itself has watched it stay
    down for a few report intervals, so heartbeats that were only missed while the
    database was away (every host looks down just after an outage) do not count: a live
    host reports within ``report_interval``."""
    if row.host_down_since is None:
        return Verdict(SUSPECT, "its host's compute service looks down")
    watched = (now - row.host_down_since).total_seconds()
    if watched < settings.report_interval * HOST_DOWN_CONFIRM_INTERVALS:
        return Verdict(WAIT)
    return Verdict(UNDO, "its host's compute service is down")


def _watch_host(
    session: Session,
    row: OperationInFlight,
    verdict: Verdict,
    host_up: bool | None,
    now: dt.datetime,
) -> None:
    """Remember when the reaper first saw the step's host down; forget it once it is up."""
    since: dt.datetime | None
    if verdict.action == SUSPECT:
        since = now
    elif host_up is not False and row.host_down_since is not None:
        since = None
    else:
        return
    session.execute(
        update(OperationInFlight)
        .where(OperationInFlight.instance_uuid == row.instance_uuid)
        .values(host_down_since=since)
    )


def _instance(session: Session, uuid: str) -> Instance | None:
    return session.scalars(select(Instance).where(Instance.uuid == uuid)).first()


def _step_host(message: Message) -> str | None:
    kwargs = first_task(message.get("signature") or {}).get("kwargs") or {}
    host = kwargs.get("host")
    return str(host) if host else None


def _host_up(session: Session, host: str, settings: Settings, now: dt.datetime) -> bool | None:
    services = session.scalars(
        select(Service).where(Service.host == host, Service.deleted == 0)
    ).all()
    if not services:
        return None
    return any(is_up(s, settings, now) for s in services)


def _drop(sessions: Sessions, uuid: str, task_id: str | None) -> None:
    with sessions() as session:
        session.execute(
            delete(OperationInFlight).where(
                OperationInFlight.instance_uuid == uuid, OperationInFlight.task_id == task_id
            )
        )


def _bump(sessions: Sessions, uuid: str, task_id: str | None) -> None:
    """Count a send; the delivery of the dead worker, if any, is now only a count of
    attempts (no owner) until the copy starts. (Rows in the order a step's start writes
    them, the record first, so the two transactions cannot deadlock.)"""
    with sessions() as session:
        session.execute(
            update(OperationInFlight)
            .where(OperationInFlight.instance_uuid == uuid, OperationInFlight.task_id == task_id)
            .values(resent=OperationInFlight.resent + 1, updated_at=utcnow())
        )
        if task_id:
            session.execute(
                update(TaskDelivery)
                .where(TaskDelivery.task_id == task_id)
                .values(worker=None, orphaned_at=None)
            )
