"""The base class of every novaq step: late acks, reject on worker loss, and a bounded
number of deliveries counted in the database (CELERY_RELIABILITY.md §1.2: a requeue on
worker loss has no limit of its own)."""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.utils.log import get_task_logger

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
            attempts = record_delivery(sessions_for(settings.sqlalchemy_url), task_id, self.name)
            limit = settings.celery.max_delivery_attempts
            if attempts > limit:
                LOG.error("%s[%s] delivered %d times; giving up", self.name, task_id, attempts)
                raise DeliveryLimitExceeded(task=self.name, attempts=attempts, limit=limit)
        return super().__call__(*args, **kwargs)

    def replace(self, sig: Any) -> Any:
        # Celery skips after_return for a replaced task (it ends in Ignore): forget here.
        self._forget(self.request.id)
        return super().replace(sig)

    def _forget(self, task_id: str | None) -> None:
        if self.count_deliveries and task_id and not self.request.is_eager:
            forget_delivery(sessions_for(get_settings().sqlalchemy_url), task_id, self.name)

    def after_return(
        self, status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        if self.count_deliveries and task_id and not self.request.is_eager:
            forget_delivery(sessions_for(get_settings().sqlalchemy_url), task_id, self.name)
