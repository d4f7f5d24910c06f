"""Deterministic fault injection for the fault-matrix tests (test-only, off by default).

A named point in the code (``reach("stop:act")``) does nothing unless the environment
variable ``NOVAQ_FAULT_POINTS_DIR`` names a directory. Then, for point ``P``:

- ``<dir>/P.pause`` exists: the process writes ``<dir>/P.reached`` (its pid inside) and
  waits until ``P.pause`` is removed. A test waits for ``P.reached``, does its harm (kills
  the worker, kills the broker, stops the database), then removes ``P.pause``.
- ``<dir>/P.raise`` exists: ``FaultInjected`` is raised (once: the file is removed).

``<family>:*`` (e.g. ``publish:*``) arms every point of a family.

So a fault lands at an exact point of a step, not wherever a timer happens to fall.
Point names: ``<step>:begin``, ``<step>:act``, ``<step>:finish`` (``compute.steps``) and
``publish:<task name>`` (``workflows.dispatch``, after the database write, before the
broker is asked).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "NOVAQ_FAULT_POINTS_DIR"
#: A paused point gives up waiting after this long, so a broken test cannot hang a worker.
MAX_PAUSE_S = 300.0


class FaultInjected(RuntimeError):
    """Raised at a point armed with ``<point>.raise``."""


def _directory() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def _file_name(point: str) -> str:
    return point.replace("/", "_")


def reach(point: str) -> None:
    """Pass ``point``: nothing, unless a test armed it (see the module's docstring)."""
    directory = _directory()
    if directory is None:
        return
    names = (_file_name(point), _file_name(point.split(":", 1)[0] + ":*"))
    for name in names:
        try:
            (directory / f"{name}.raise").unlink()
        except FileNotFoundError:
            continue
        raise FaultInjected(f"fault injected at {point}")
    armed = next((n for n in names if (directory / f"{n}.pause").exists()), None)
    if armed is None:
        return
    pause_file = directory / f"{armed}.pause"
    (directory / f"{armed}.reached").write_text(str(os.getpid()))
    deadline = time.monotonic() + MAX_PAUSE_S
    while pause_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def arm_pause(directory: Path, point: str) -> None:
    """(Tests) make the next process reaching ``point`` wait there."""
    name = _file_name(point)
    (directory / f"{name}.reached").unlink(missing_ok=True)
    (directory / f"{name}.pause").write_text("")


def arm_raise(directory: Path, point: str) -> None:
    """(Tests) make the next process reaching ``point`` raise ``FaultInjected``."""
    (directory / f"{_file_name(point)}.raise").write_text("")


def wait_reached(directory: Path, point: str, timeout_s: float = 120.0) -> int:
    """(Tests) wait until a process waits at ``point``; returns its pid."""
    reached = directory / f"{_file_name(point)}.reached"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reached.exists():
            text = reached.read_text().strip()
            if text:
                return int(text)
        time.sleep(0.05)
    raise TimeoutError(f"no process reached fault point {point} in {timeout_s:.0f} s")


def release(directory: Path, point: str) -> None:
    """(Tests) let the process waiting at ``point`` go on."""
    (directory / f"{_file_name(point)}.pause").unlink(missing_ok=True)
