"""The base class of every novaq step: late acks, reject on worker loss, and a bounded
number of deliveries counted in the database (CELERY_RELIABILITY.md §1.2: a requeue on
worker loss has no limit of its own)."""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.utils.log import get_task_logger

from compute import in_flight
from compute.deliveries import forget_delivery, record_delivery
from compute.sessions import sessions_for
from novaq.exceptions import NovaqError
from novaq.settings import get_settings

LOG = get_task_logger(__name__)


class DeliveryLimitExceeded(NovaqError):
    msg_fmt = "%(task)s was delivered %(attempts)s times (limit %(limit)s); giving up"


class NovaqTask(Task):  # type: ignore[misc]
    acks_late = True
    reject_on_worker_lost = True
    #: Queries and fan-outs are cheap to lose; they are not counted.
    count_deliveries = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        task_id = self.request.id
        if self.count_deliveries and task_id and not self.request.is_eager:
            settings = get_settings()
            attempts = record_delivery(
                sessions_for(settings.sqlalchemy_url),
                task_id,
                self.name,
                worker=self.request.hostname,
                host=settings.host,
                message=self._own_message(),
            )
            limit = settings.celery.max_delivery_attempts
            if attempts > limit:
                LOG.error("%s[%s] delivered %d times; giving up", self.name, task_id, attempts)
                raise DeliveryLimitExceeded(task=self.name, attempts=attempts, limit=limit)
        return super().__call__(*args, **kwargs)

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
        if self.count_deliveries and task_id and not self.request.is_eager:
            forget_delivery(
                sessions_for(get_settings().sqlalchemy_url),
                task_id,
                self.name,
                succeeded=succeeded,
                successor=successor,
            )

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
