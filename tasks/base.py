"""The base class of every novaq task: late acks, reject on worker loss, a bounded
number of deliveries counted in the database (CELERY_RELIABILITY.md §1.2: a requeue on
worker loss has no limit of its own), and a database outage waited out.

Where the delivery is written. Its start (the operation's record, the step record, the
count) and its end (the record passed on, the step record ended, the count removed) are
each a transaction of their own, as the delivery starts and as the task returns, unless
the step's own transactions carry them (``compute.delivery_ledger``): a task with
``delivery_rides`` has its start ride its first write, and one with ``done_outcome`` its
end ride the finish of a step that is done and ends its workflow. A copy the broker
marks redelivered always counts itself first, in a transaction of its own.

Riding out an outage. Each call of a task (a delivery, or a new-style error callback,
which Celery calls in-process through the same ``__call__``) runs inside an outage budget
of ``[database] outage_tolerance_s`` (``models.outage``): every transaction waits for the
database before it starts, and the whole call is made again after a
``DatabaseUnavailable`` cut a transaction mid-way, with backoff, until the budget ends.

NOTE: in-process (``outage.ride_out``), not ``self.retry(countdown=...)``, because:

- the message stays unacknowledged while the step waits, so a worker that dies during the
  outage still has it redelivered; ``retry`` acks it once it has published a copy, and a
  copy with a countdown is an ETA message that Redis hands out again after the visibility
  timeout (CELERY_RELIABILITY.md §1.3);
- a retried message counts as one more delivery (same task id) against
  ``max_delivery_attempts``, which an outage would use up, and counting needs the database;
- error callbacks are called in-process, not sent: ``retry`` does not exist for them, and
  the undo must wait for the database just the same;
- a step knows which of its transactions committed (``compute.steps.run_step`` rides out
  its begin, its finish and its undo one by one, so the finish of a guest that spawned is
  retried alone); a message retry would start over from begin, which skips a build caught
  in ``spawning``.

The cost: the worker's slot is held while it waits (nothing it could run would reach the
database either), and ``[celery] visibility_timeout`` must exceed a step plus the waits.

Past the budget the task fails as it would for any error: ``run_step`` has run the step's
undo with a budget of its own, and the error callback gets a fresh budget too. If the
database is still down after that, the instance keeps its in-flight task_state and its
open action event, which the compute host's start-up recovery finishes or undoes.
"""

from __future__ import annotations

import json
from typing import Any

from celery import Task
from celery.signals import task_revoked
from celery.utils import uuid
from celery.utils.log import get_task_logger
from sqlalchemy.orm import Session

from compute import delivery_ledger, in_flight, step_records
from compute.deliveries import (
    Delivery,
    Ending,
    forget_delivery,
    record_delivery,
    settle_delivery,
)
from compute.delivery_ledger import DeliveryLimitExceeded, Ledger
from compute.sessions import sessions_for
from models import StepOutcome, outage
from novaq.exceptions import DatabaseUnavailable
from novaq.settings import Settings, get_settings

LOG = get_task_logger(__name__)

__all__ = ["DeliveryLimitExceeded", "NovaqTask", "patience"]


def patience(settings: Settings) -> outage.Patience:
    """The outage budget of one task call, from ``[database]``."""
    group = settings.database
    return outage.Patience(
        group.outage_tolerance_s, group.db_retry_interval, group.db_max_retry_interval
    )


class NovaqTask(Task):  # type: ignore[misc]
    acks_late = True
    reject_on_worker_lost = True
    #: Queries and fan-outs are cheap to lose; they are not counted.
    count_deliveries = True
    #: The delivery's start rides the step's first write transaction (``run_step``'s
    #: begin, the scheduler's via ``delivery_ledger.riding``) instead of one of its own:
    #: for tasks whose first write comes before any work that a redelivery must know
    #: about (``compute.delivery_ledger`` says what is given up).
    delivery_rides = False
    #: The ``outcome`` the task returns once its step is ``done``: the delivery's end
    #: then rides the step's finish when the step ends its workflow (None: written as
    #: the task returns).
    done_outcome: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        settings = get_settings()
        with outage.tolerating(patience(settings), self._owner(self.request.id)):
            try:
                ledger = self._open_ledger(settings)
                with delivery_ledger.open_for(ledger):
                    # A re-run is what a redelivery would do (every step is idempotent
                    # under redelivery), minus what run_step already rode out by itself.
                    return outage.ride_out(lambda: self._run_call(*args, **kwargs), "the task")
            except DatabaseUnavailable as exc:
                # (the task logger names the task and its id)
                LOG.error(
                    "gave up waiting for the database (%s s): %s",
                    settings.database.outage_tolerance_s,
                    exc,
                )
                raise

    def _run_call(self, *args: Any, **kwargs: Any) -> Any:
        if self.request.called_directly:  # an errback, a direct call
            return super().__call__(*args, **kwargs)
        # Run by a worker: Celery's tracer has pushed this request already, and reads its
        # chain and callbacks once the body returns; ``Task.__call__`` would push a copy,
        # and what ``on_replace`` takes from the request must be taken from the tracer's.
        return self.run(*args, **kwargs)

    def _open_ledger(self, settings: Settings) -> Ledger | None:
        """This delivery's ledger (kept on the request for ``after_return``). Its start is
        written here, in a transaction of its own, unless it can ride the step's first
        write: a task that does not ride, or a copy the broker says was delivered before
        (a worker died with it, maybe before its first write: counted at once, so a
        message that kills its worker is still given up)."""
        request = self.request
        if not self._counted(request.id):
            return None
        redelivered = bool((request.delivery_info or {}).get("redelivered"))
        delivery = Delivery(
            str(request.id),
            self.name,
            worker=request.hostname,
            host=settings.host,
            message=self._own_message(),
            step=step_start(request, self.name, settings.host),
            redelivered=redelivered and self.delivery_rides,
        )
        ledger = Ledger(delivery, settings.celery.max_delivery_attempts)
        request.novaq_ledger = ledger
        if self.done_outcome is not None and not request.chain:
            ledger.done = Ending(
                succeeded=True, end=step_records.StepEnd(StepOutcome.SUCCESS, self.done_outcome)
            )
        if self.delivery_rides and not redelivered:
            return ledger
        sessions = sessions_for(settings.sqlalchemy_url)
        attempts = outage.ride_out(
            lambda: record_delivery(sessions, delivery), "counting the delivery"
        )
        ledger.started = True
        if attempts > ledger.limit:
            LOG.error("%s[%s] delivered %d times; giving up", self.name, request.id, attempts)
        ledger.check(attempts)
        return ledger

    def _owner(self, task_id: str | None) -> str:
        # An errback, called in-process, has no id of its own.
        return f"{self.name}[{task_id}]" if task_id else self.name

    def _counted(self, task_id: str | None) -> bool:
        return bool(self.count_deliveries and task_id and not self.request.is_eager)

    def replace(self, sig: Any) -> Any:
        """Celery's ``replace``, except that each step of the replacement has a task id
        of its own (Celery would give the first one this task's id, so Flower and the
        timeline would show the scheduler step and the build as one task), and this step
        then ends in success, its result naming what it handed over to. They stay linked:
        the replacement's parent id is this step, and every step carries the request id.

        A replacement ``handing_over`` prepared is sent as it was prepared (and its
        hand-over not written again if the transaction that carried it committed)."""
        if sig is getattr(self.request, "novaq_replacement", None):
            return self.on_replace(sig)
        for task in steps_of(sig):
            task.options.setdefault("task_id", uuid())
        return super().replace(sig)

    def handing_over(self, session: Session, sig: Any) -> bool:
        """Write the hand-over to ``sig`` in the caller's transaction (the step's last
        write, a ``delivery_ledger.riding`` one) instead of one of its own as it
        replaces itself: ``sig`` is prepared as ``replace`` prepares it (its chain, its
        callbacks and errbacks, its ids), the record passes to it, the step ends. Then,
        once that transaction committed, ``return self.replace(sig)`` with the same
        signature sends it. If the publish fails, the record names the replacement for
        the reaper, as after a hand-over of its own. False when nothing was written
        (not a counted delivery: ``replace`` writes it)."""
        request = self.request
        if request.is_eager or not self._counted(request.id):
            return False
        request.novaq_preparing = True
        try:
            for task in steps_of(sig):
                task.options.setdefault("task_id", uuid())
            super().replace(sig)  # (its on_replace, below, only prepares)
        finally:
            request.novaq_preparing = False
        request.novaq_replacement = sig
        return delivery_ledger.hand_over(session, self._handover(sig))

    def _handover(self, sig: Any) -> Ending:
        """This step's end once it handed over to ``sig`` (prepared): the operation's
        record passes to the replacement, the step record says which steps it named."""
        request = self.request
        successor = handover_message(sig, request.root_id, request.id)
        end = step_records.StepEnd(StepOutcome.SUCCESS, f"handed over to {', '.join(_ids_of(sig))}")
        return Ending(succeeded=True, successor=successor, end=end)

    def on_replace(self, sig: Any) -> Any:
        request = self.request
        if getattr(request, "novaq_preparing", False):
            return sig
        if request.is_eager or not self._counted(request.id):
            return super().on_replace(sig)
        # The operation's record passes to the replacement before it is sent, in the
        # transaction that ends this step (its delivery, its step record), as the end of
        # any step passes it to the next of its chain; unless the step's last write
        # carried it (``handing_over``).
        ledger: Ledger | None = getattr(request, "novaq_ledger", None)
        carried = sig is getattr(request, "novaq_replacement", None)
        if not (carried and ledger is not None and ledger.ended):
            self._end(request.id, self._handover(sig))
        # The replacement carries the rest of this chain and its callbacks: this step
        # must not send them again as it returns.
        request.chain = None
        request.callbacks = None
        sig.delay()
        # (A publish that failed for good fails this step: after_return then records it.)
        request.novaq_handed_over = True
        return {"replaced_by": _ids_of(sig), "task": steps_of(sig)[0].task}

    def _own_message(self) -> in_flight.Message | None:
        """This step's message, as the reaper would send it again (instance steps only)."""
        request = self.request
        kwargs = request.kwargs or {}
        if not (kwargs.get("instance_uuid") or kwargs.get("instance_uuids")):
            return None
        return in_flight.message_of_request(
            self.name,
            request.id,
            dict(kwargs),
            request.chain,
            request.errbacks,
            request.root_id,
            request.parent_id,
        )

    def _end(self, task_id: str | None, ending: Ending) -> None:
        """The delivery's end in a transaction of its own (with its start, if no
        transaction of the step carried it)."""
        ledger: Ledger | None = getattr(self.request, "novaq_ledger", None)
        if ledger is None or not self._counted(task_id) or ledger.delivery.task_id != task_id:
            return
        settings = get_settings()
        sessions = sessions_for(settings.sqlalchemy_url)
        delivery = ledger.delivery

        def write() -> None:
            if ledger.started:
                forget_delivery(sessions, delivery.task_id, delivery.task_name, ending)
            else:
                settle_delivery(sessions, delivery, ending)

        # after_return runs outside __call__'s budget: it gets one of its own.
        with outage.tolerating(patience(settings), self._owner(task_id)):
            try:
                outage.ride_out(write, "forgetting the delivery")
                ledger.started = ledger.ended = True
            except DatabaseUnavailable as exc:
                # The row stays: the trace of a delivery that did not end cleanly.
                LOG.error("delivery record of %s kept: %s", self._owner(task_id), exc)

    def after_return(
        self, status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        request = self.request
        if getattr(request, "novaq_handed_over", False):
            return  # replace() has ended this step already
        end = end_of(status, retval)
        ledger: Ledger | None = getattr(request, "novaq_ledger", None)
        if ledger is not None and ledger.ended:
            # The step's finish carried its end. Something after it failed (or returned
            # another outcome): only the step record says so.
            if ledger.done is None or ledger.done.end != end:
                step_records.record_end(sessions_for(get_settings().sqlalchemy_url), task_id, end)
            return
        succeeded = status == "SUCCESS"
        successor = (
            in_flight.successor_of(request.chain, request.root_id, task_id) if succeeded else None
        )
        self._end(task_id, Ending(succeeded=succeeded, successor=successor, end=end))

    def on_retry(self, exc: Any, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        # Celery calls no after_return for a retry: the delivery stays counted (the retry
        # is one more delivery of the same id); only the step record says so.
        if self._counted(task_id):
            end = step_records.StepEnd(StepOutcome.RETRIED, _text(exc))
            sessions = sessions_for(get_settings().sqlalchemy_url)
            step_records.record_end(sessions, task_id, end)


def step_start(request: Any, task_name: str, host: str | None) -> step_records.StepStart | None:
    """A delivery of ``request`` (a task's request, or a worker's ``Request``), for its
    step record; None for a task that acts on no instance."""
    kwargs = request.kwargs or {}
    uuids = kwargs.get("instance_uuids") or (
        [kwargs["instance_uuid"]] if kwargs.get("instance_uuid") else []
    )
    if not uuids or not request.id:
        return None
    delivery = request.delivery_info or {}
    return step_records.StepStart(
        task_id=str(request.id),
        task_name=task_name,
        request_id=str(kwargs.get("request_id") or ""),
        instance_uuids=tuple(str(u) for u in uuids),
        parent_id=request.parent_id,
        queue=delivery.get("routing_key"),
        worker=request.hostname,
        host=host,
    )


def handover_message(sig: Any, root_id: str | None, parent_id: str) -> in_flight.Message:
    """The operation's record once step ``parent_id`` handed over to ``sig`` (frozen)."""
    sig.set(parent_id=parent_id)
    for errback in list(sig.options.get("link_error") or ()):
        # A chain hands its errbacks to its steps only as it is sent; the record's first
        # step must name them for the reaper's undo (``compute.periodic.reaper.undo``).
        for task in steps_of(sig):
            task.link_error(errback)
    message = in_flight.message_of_signature(json.loads(json.dumps(sig)))
    message.update(root_id=root_id, parent_id=parent_id)
    return message


def end_of(status: str, retval: Any) -> step_records.StepEnd:
    """How a step ended, from Celery's state and return value."""
    if status == "SUCCESS":
        detail = retval.get("outcome") if isinstance(retval, dict) else None
        return step_records.StepEnd(StepOutcome.SUCCESS, str(detail) if detail else None)
    if status == "RETRY":
        return step_records.StepEnd(StepOutcome.RETRIED, _text(retval))
    return step_records.StepEnd(StepOutcome.FAILURE, _text(retval))


def _text(exc: Any) -> str:
    if isinstance(exc, BaseException):
        return f"{type(exc).__name__}: {exc}"
    return str(exc)


def _ids_of(sig: Any) -> list[str]:
    return [str(t.id) for t in steps_of(sig)]


def steps_of(sig: Any) -> list[Any]:
    """The task signatures of ``sig`` (a chain's, in order)."""
    tasks = getattr(sig, "tasks", None)
    if not tasks:
        return [sig]
    return [step for task in tasks for step in steps_of(task)]


@task_revoked.connect
def _record_revoked(
    sender: Any = None, request: Any = None, expired: bool = False, **_: Any
) -> None:
    """A step revoked (or expired) before or while it ran ends its record ``revoked``:
    its after_return never comes. One transaction, only on a revocation."""
    if request is None or not isinstance(sender, NovaqTask) or not sender.count_deliveries:
        return
    settings = get_settings()
    start = step_start(request, sender.name, settings.host)
    if start is None:
        return
    end = step_records.StepEnd(StepOutcome.REVOKED, "expired" if expired else "revoked")
    sessions = sessions_for(settings.sqlalchemy_url)
    try:
        step_records.record_revoked(sessions, start, end)
    except Exception:  # noqa: BLE001 - the record is a trace; the worker carries on
        LOG.exception("could not record the revocation of %s[%s]", sender.name, request.id)
