"""The bodies of novaq's periodic tasks (``compute/periodic/schedule.py`` lists them).

Each is a plain function ``f(ctx: PeriodicContext) -> dict`` that does one pass on one
host (or, for a cluster task, for the cluster) and returns a JSON-able summary of what it
did; the summary is kept as the task's last result (``novaq periodic-list``). The Celery
wrapper (``tasks/periodic.py``) holds the no-overlap lease and checks the gate option, so
a body only does its job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from novaq.settings import Settings
from virt.driver import ComputeDriver


@dataclass(frozen=True, slots=True)
class PeriodicContext:
    db_url: str
    settings: Settings
    host: str
    #: This host's hypervisor; None for a cluster task.
    driver: ComputeDriver | None = None
    #: The public API (``workflows.api``), for tasks that act as Nova's do, through the
    #: API (confirm a resize, stop a server, unrescue): passed in so ``compute/`` does not
    #: import ``workflows/``.
    api: Any = None

    @property
    def hypervisor(self) -> ComputeDriver:
        if self.driver is None:
            raise RuntimeError(f"periodic task on {self.host} needs a hypervisor")
        return self.driver
