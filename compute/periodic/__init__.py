"""The bodies of novaq's periodic tasks (``compute/periodic/schedule.py`` lists them).

Each is a plain function ``f(ctx: PeriodicContext) -> dict`` that does one pass on one
host (or, for a cluster task, for the cluster) and returns a JSON-able summary of what it
did (operations it needs, a stop or a confirm, are asked for with ``ctx.request`` and sent
through the public API by the wrapper); the summary is kept as the task's last result
(``novaq periodic-list``). The Celery wrapper (``tasks/periodic.py``) holds the
no-overlap lease and checks the gate option, so a body only does its job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compute.sessions import Sessions
from novaq.settings import Settings
from virt.driver import ComputeDriver


@dataclass(frozen=True, slots=True)
class OperationRequest:
    """One public-API operation (``workflows.api.<action>(instance_uuid)``) a pass asks for."""

    action: str
    instance_uuid: str
    #: The summary key the pass lists ``listed`` under; it moves to ``failed`` on a refusal.
    outcome: str
    refused: str
    listed: str


@dataclass(frozen=True, slots=True)
class PeriodicContext:
    sessions: Sessions
    settings: Settings
    host: str
    #: This host's hypervisor; None for a cluster task.
    driver: ComputeDriver | None = None
    #: Operations the pass asks for (a stop, a confirm, an unrescue), which Nova's periodic
    #: tasks make through the compute API. ``compute/`` never calls up into the API: the
    #: task wrapper (``tasks/periodic.py``) sends them through it once the pass is done.
    requests: list[OperationRequest] = field(default_factory=list)

    def request(
        self, action: str, instance_uuid: str, outcome: str, refused: str, listed: str = ""
    ) -> str:
        """Ask for ``action`` on the instance; ``outcome`` is where the pass's summary
        lists it (as ``listed``, by default the instance uuid), ``refused`` Nova's log line
        (``%s``: the instance uuid) should the API refuse. Returns ``outcome``."""
        request = OperationRequest(action, instance_uuid, outcome, refused, listed or instance_uuid)
        self.requests.append(request)
        return outcome

    @property
    def hypervisor(self) -> ComputeDriver:
        if self.driver is None:
            raise RuntimeError(f"periodic task on {self.host} needs a hypervisor")
        return self.driver
