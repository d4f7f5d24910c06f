"""What the API tests share: servers placed on host1 by hand (for the API's refusals) or
booted through the in-thread worker, a delete that leaves no guest behind, the messages
waiting in queues, the actions recorded, and a periodic pass's context on host1."""

from __future__ import annotations

import contextlib
from typing import Any

from sqlalchemy import func, select

from compute.periodic import PeriodicContext
from compute.sessions import sessions_for
from models import InstanceAction, utcnow
from models.db import session_scope
from novaq.exceptions import FlavorExists
from novaq.settings import get_settings
from tasks import app, context
from tests.factories import make_compute_node, make_instance
from workflows import api


def in_thread_worker(
    queues: tuple[str, ...] = ("scheduler", "compute.host1"), concurrency: int = 2
) -> contextlib.AbstractContextManager[Any]:
    """A real Celery worker in a thread consuming ``queues``: its bootstep registers host1
    from libvirt's test:/// driver, as a real worker does."""
    from celery.contrib.testing.worker import start_worker

    return start_worker(
        app,
        queues=list(queues),
        perform_ping_check=False,
        pool="threads",
        concurrency=concurrency,
        shutdown_timeout=30,
    )


def periodic_context(db_url: str, **settings: Any) -> PeriodicContext:
    """As the periodic task builds it on host1, with ``settings`` overriding (shrunk)."""
    shrunk = get_settings().model_copy(update=settings)
    return PeriodicContext(sessions_for(db_url), shrunk, "host1", context.driver())


def boot_active(name: str = "vm", flavor: str = "m1") -> str:
    with contextlib.suppress(FlavorExists):
        api.create_flavor(flavor, 1, 512, 1)
    [uuid] = api.boot(name, flavor, "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    return uuid


def delete_and_wait(uuid: str) -> None:
    """Leave no guest behind: the next test's instance-00000001 must be free."""
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


def placed_server(db_url: str, vm_state: str = "active", **overrides: Any) -> str:
    """A launched server on host1, whose compute service is up (no guest: nothing runs)."""
    make_compute_node(db_url, "host1")
    values: dict[str, Any] = dict(
        host="host1", node="host1", vm_state=vm_state, task_state=None, launched_at=utcnow()
    )
    values.update(overrides)
    return make_instance(db_url, **values)


def action_count(db_url: str) -> int:
    """Instance actions recorded so far: an API call refused must add none."""
    with session_scope(db_url) as session:
        return int(session.scalar(select(func.count()).select_from(InstanceAction)) or 0)


def queued(*queues: str) -> int:
    """Messages waiting in ``queues``: an API call refused must send none."""
    with app.connection_for_write() as conn:
        return sum(conn.SimpleQueue(queue).qsize() for queue in queues)


def clear_queues(*queues: str) -> None:
    """Leave no message behind for a later test's worker."""
    with app.connection_for_write() as conn:
        for queue in queues:
            conn.SimpleQueue(queue).clear()
