"""The base class of every novaq task: late acks, reject on worker loss, a bounded
number of deliveries counted in the database (CELERY_RELIABILITY.md §1.2: a requeue on
worker loss has no limit of its own), and a database outage waited out.

Riding out an outage. Each call of a task (a delivery, or a new-style error callback,
which Celery calls in-process through the same ``__call__``) runs inside an outage budget
of ``[database] outage_tolerance_s`` (``models.outage``): every transaction waits for the
database before it starts, and the whole call is made again after a
``DatabaseUnavailable`` cut a transaction mid-way, with backoff, until the budget ends.

NOTE: in-process (tenacity), not ``self.retry(countdown=...)``, because:

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

from typing import Any

from celery import Task
from celery.utils.log import get_task_logger

from compute import in_flight
from compute.deliveries import forget_delivery, record_delivery
from compute.sessions import sessions_for
from models import outage
from novaq.exceptions import DatabaseUnavailable, NovaqError
from novaq.settings import Settings, get_settings

LOG = get_task_logger(__name__)


class DeliveryLimitExceeded(NovaqError):
    msg_fmt = "%(task)s was delivered %(attempts)s times (limit %(limit)s); giving up"


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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        settings = get_settings()
        with outage.tolerating(patience(settings), self._owner(self.request.id)):
            try:
                self._count_delivery(settings)
                # A re-run is what a redelivery would do (every step is idempotent under
                # redelivery), minus what run_step already rode out by itself.
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
        return super().__call__(*args, **kwargs)

    def _count_delivery(self, settings: Settings) -> None:
        task_id = self.request.id
        if not self._counted(task_id):
            return
        sessions = sessions_for(settings.sqlalchemy_url)
        attempts = outage.ride_out(
            lambda: record_delivery(
                sessions,
                task_id,
                self.name,
                worker=self.request.hostname,
                host=settings.host,
                message=self._own_message(),
            ),
            "counting the delivery",
        )
        limit = settings.celery.max_delivery_attempts
        if attempts > limit:
            LOG.error("%s[%s] delivered %d times; giving up", self.name, task_id, attempts)
            raise DeliveryLimitExceeded(task=self.name, attempts=attempts, limit=limit)

    def _owner(self, task_id: str | None) -> str:
        # An errback, called in-process, has no id of its own.
        return f"{self.name}[{task_id}]" if task_id else self.name

    def _counted(self, task_id: str | None) -> bool:
        return bool(self.count_deliveries and task_id and not self.request.is_eager)

    def replace(self, sig: Any) -> Any:
        # Celery skips after_return for a replaced task (it ends in Ignore): forget here.
        # The replacement keeps this task's id (Celery freezes it so) and its chain: it is
        # what runs next.
        request = self.request
        successor = in_flight.message_of_request(
            sig.task,
            request.id,
            dict(sig.kwargs),
            request.chain,
            list(sig.options.get("link_error") or request.errbacks or ()),
            request.root_id,
            request.parent_id,
        )
        self._forget(request.id, succeeded=True, successor=successor)
        return super().replace(sig)

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

    def _forget(
        self,
        task_id: str | None,
        succeeded: bool = False,
        successor: in_flight.Message | None = None,
    ) -> None:
        if not self._counted(task_id):
            return
        settings = get_settings()
        sessions = sessions_for(settings.sqlalchemy_url)
        # after_return runs outside __call__'s budget: it gets one of its own.
        with outage.tolerating(patience(settings), self._owner(task_id)):
            try:
                outage.ride_out(
                    lambda: forget_delivery(
                        sessions,
                        str(task_id),
                        self.name,
                        succeeded=succeeded,
                        successor=successor,
                    ),
                    "forgetting the delivery",
                )
            except DatabaseUnavailable as exc:
                # The row stays: the trace of a delivery that did not end cleanly.
                LOG.error("delivery record of %s kept: %s", self._owner(task_id), exc)

    def after_return(
        self, status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        succeeded = status == "SUCCESS"
        successor = (
            in_flight.successor_of(self.request.chain, self.request.root_id, task_id)
            if succeeded
            else None
        )
        self._forget(task_id, succeeded=succeeded, successor=successor)
