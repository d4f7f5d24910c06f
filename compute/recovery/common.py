"""What start-up recovery (``compute/recovery/init_host.py``) hands each of its handlers: the host
being recovered and an instance found on it. They live apart from the entry point so
that the handlers kept in modules of their own (``compute/recovery/moves.py``,
``compute/recovery/resume.py``) can take them without importing the module that
imports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from compute.sessions import Sessions
from novaq.settings import Settings
from virt.driver import ComputeDriver


@dataclass(frozen=True, slots=True)
class Host:
    """The host being recovered; ``settings`` is None when ``recover_host`` got none."""

    sessions: Sessions
    driver: ComputeDriver
    host: str
    settings: Settings | None


@dataclass(frozen=True, slots=True)
class Found:
    """An instance of the host as it was found at start."""

    uuid: str
    vm_state: str
    task_state: str | None
