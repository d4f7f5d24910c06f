"""What ``novaq up`` does when one of its processes dies: restart it, with backoff, and
say so; stop the cluster only when the same process keeps dying.

A worker, beat, Flower or the embedded broker that dies is restarted after a pause that
doubles with each recent death (1 s, 2 s, 4 s, ... up to 30 s), with one line naming it,
how it ended and where its log is. The fifth death of one process within 60 s means that
restarting does not help (a bad setting, a broken install): the cluster stops, saying
why. A death older than the window no longer counts, so a process that dies once an
hour is restarted for ever.

The policy is a plain value and the supervisor a plain object polled by the cluster's
foreground loop (``Cluster.run_forever``): no thread, no signal handling of its own.
"""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """``max_deaths`` deaths of one process within ``window_s`` stop the cluster; before
    that, the n-th recent death is restarted after ``first_delay_s * 2**(n-1)`` seconds,
    at most ``max_delay_s``."""

    max_deaths: int = 5
    window_s: float = 60.0
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0

    def delay(self, recent_deaths: int) -> float:
        return min(self.first_delay_s * 2 ** max(recent_deaths - 1, 0), self.max_delay_s)


class Member(Protocol):
    """A supervised process: a cluster child or the embedded broker."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def log_path(self) -> Path: ...

    def exit_status(self) -> int | None:
        """The exit status once the process has ended (negative: killed by a signal)."""
        ...

    def restart(self) -> None:
        """Start the process again; raise if it cannot be started."""
        ...


def describe_exit(status: int) -> str:
    """``exited with status 3`` or ``was killed by SIGKILL``."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        return f"was killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"was killed by signal {-status}"


def cluster_status(status: int) -> int:
    """The launcher's exit status for a child's: the shell's 128+N for a signal, 1 for a
    child that exited 0 (it should not have)."""
    if status < 0:
        return 128 - status
    return status or 1


@dataclass
class _History:
    deaths: deque[float] = field(default_factory=deque)
    restart_at: float | None = None  # set while a restart is pending


class Supervisor:
    """Call :meth:`poll` often; it returns None while the cluster goes on, else the exit
    status the cluster stops with. ``report`` receives one line per event."""

    def __init__(
        self,
        report: Callable[[str], None],
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.report = report
        self.policy = policy or RestartPolicy()
        self.clock = clock
        self._history: dict[str, _History] = {}

    def pending(self) -> list[str]:
        """The members waiting for their restart."""
        return sorted(n for n, h in self._history.items() if h.restart_at is not None)

    def poll(self, members: Sequence[Member]) -> int | None:
        for member in members:
            history = self._history.setdefault(member.name, _History())
            if history.restart_at is None:
                status = member.exit_status()
                if status is None:
                    continue
                stop = self._died(member, history, describe_exit(status), status)
            elif self.clock() >= history.restart_at:
                stop = self._restart(member, history)
            else:
                continue
            if stop is not None:
                return stop
        return None

    def _restart(self, member: Member, history: _History) -> int | None:
        history.restart_at = None
        try:
            member.restart()
        except Exception as exc:  # noqa: BLE001 - a failed restart is one more death
            return self._died(member, history, f"could not be restarted ({exc})", 1)
        self.report(f"{member.name} restarted (pid {member.pid})")
        return None

    def _died(self, member: Member, history: _History, how: str, status: int) -> int | None:
        now = self.clock()
        history.deaths.append(now)
        while history.deaths and history.deaths[0] <= now - self.policy.window_s:
            history.deaths.popleft()
        deaths = len(history.deaths)
        window = f"{self.policy.window_s:g} s"
        if deaths >= self.policy.max_deaths:
            self.report(
                f"{member.name} {how}: {deaths} deaths within {window}, restarting does not "
                f"help; stopping the cluster; see {member.log_path}"
            )
            return cluster_status(status)
        delay = self.policy.delay(deaths)
        history.restart_at = now + delay
        self.report(
            f"{member.name} {how}; restarting it in {delay:g} s (death {deaths} of "
            f"{self.policy.max_deaths} allowed within {window}); see {member.log_path}"
        )
        return None
