"""What a task costs the database, counted through a real in-thread worker: COMMITs and
statements (BEGIN aside) per task, from SQLAlchemy's engine events, attributed to the task
whose thread ran them (Celery's task_prerun/postrun signals say which)."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from celery.signals import task_postrun, task_prerun
from sqlalchemy import Engine, event, func, select

from models import TaskDelivery
from models.db import session_scope


class TaskCosts:
    """COMMITs and statements per task name, while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.commits: collections.Counter[str] = collections.Counter()
        self.statements: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        self._task = threading.local()

    def task(self) -> str | None:
        return getattr(self._task, "name", None)

    def started(self, sender: Any = None, **_: Any) -> None:
        self._task.name = getattr(sender, "name", None)

    def ended(self, sender: Any = None, **_: Any) -> None:
        self._task.name = None

    def commit(self, conn: Any) -> None:
        task = self.task()
        if self.on and task:
            self.commits[task] += 1

    def statement(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        task = self.task()
        if self.on and task and not statement.lstrip().upper().startswith("BEGIN"):
            self.statements[task].append(statement)

    def take(self) -> tuple[dict[str, int], dict[str, int]]:
        """Commits and statement counts per task since the last take; then start afresh."""
        taken = dict(self.commits), {task: len(s) for task, s in self.statements.items()}
        self.commits.clear()
        self.statements.clear()
        return taken


@contextlib.contextmanager
def counting_task_costs() -> Iterator[TaskCosts]:
    """A ``TaskCosts`` listening while the block runs (the ``task_costs`` fixture)."""
    found = TaskCosts()
    hooks: list[tuple[type[Engine], str, Callable[..., Any]]] = [
        (Engine, "commit", found.commit),
        (Engine, "before_cursor_execute", found.statement),
    ]
    for target, name, fn in hooks:
        event.listen(target, name, fn)
    task_prerun.connect(found.started, weak=False)
    task_postrun.connect(found.ended, weak=False)
    try:
        yield found
    finally:
        task_prerun.disconnect(found.started)
        task_postrun.disconnect(found.ended)
        for target, name, fn in hooks:
            event.remove(target, name, fn)


def settled(db_url: str) -> None:
    """Every step has returned (its after_return done): no delivery row left."""
    deadline = time.monotonic() + 10
    while True:
        with session_scope(db_url) as session:
            left = session.scalar(select(func.count()).select_from(TaskDelivery))
        if left == 0:
            return
        assert time.monotonic() < deadline, f"{left} delivery rows left"
        time.sleep(0.05)
