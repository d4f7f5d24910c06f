"""Faults of the infrastructure for the soak, beside its worker SIGKILLs: the broker
SIGKILLed and restarted (on its data or empty), the database refusing connections for a
while (a ``TcpProxy`` between the workers and PostgreSQL).

A fault begins at once and ends by itself on a background thread after a bounded time, so
the soak goes on sending requests while it lasts (they may be refused: that is counted).
The soak injects one fault at a time: it waits, bounded, until the previous one has
ended, so each is a single fault as the issue states them.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from tests.integration.private_redis import BrokerNotStarted, PrivateRedis
from tests.tcp_proxy import TcpProxy


class Fault(Protocol):
    #: What the report counts it as ("broker restart", "db outage", ...).
    kind: str
    #: How long it lasts once injected.
    duration_s: float

    def inject(self, ended: Callable[[str], None]) -> str:
        """Begin the fault, return at once with a line for the log; ``ended`` gets a line
        when it is over."""

    def active(self) -> bool:
        """Whether it is still in effect."""

    def wait_over(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until it has ended; whether it has."""

    @property
    def errors(self) -> list[str]:
        """What went wrong with the fault itself (a broker that did not come back)."""


class _Timeline:
    """One long-lived daemon thread that runs the ends of faults at their time.

    Long-lived on purpose: a child process started from a thread (a restarted
    ``redis-server``) gets the parent-death signal (``workers._die_with_parent``) when
    *that thread* exits, so a thread per fault would kill the broker it just restarted.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[float, Callable[[], None]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def after(self, delay_s: float, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
                self._thread.start()
        self._queue.put((time.monotonic() + delay_s, job))

    def _run(self) -> None:
        while True:
            when, job = self._queue.get()  # one fault at a time: in order of injection
            time.sleep(max(0.0, when - time.monotonic()))
            job()


_TIMELINE = _Timeline()


class _TimedFault:
    """A fault that a background thread ends after ``duration_s``."""

    kind = "fault"

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self._errors: list[str] = []
        self._over = threading.Event()
        self._over.set()

    @property
    def errors(self) -> list[str]:
        return self._errors

    def active(self) -> bool:
        return not self._over.is_set()

    def wait_over(self, timeout_s: float) -> bool:
        return self._over.wait(timeout_s)

    def inject(self, ended: Callable[[str], None]) -> str:
        self._over.clear()
        line = self._begin()
        _TIMELINE.after(self.duration_s, lambda: self._end_now(ended))
        return line

    def _end_now(self, ended: Callable[[str], None]) -> None:
        try:
            self._end()
            ended(f"{self.kind}: over")
        except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
            self._errors.append(f"{self.kind}: could not end the fault: {exc}")
            ended(f"{self.kind}: could not end the fault: {exc}")
        finally:
            self._over.set()

    def _begin(self) -> str:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError


class BrokerRestart(_TimedFault):
    """SIGKILL the private ``redis-server``, restart it ``down_s`` later, on its AOF or
    (``fresh``) empty: a broker that lost every queued and unacked message."""

    def __init__(self, broker: PrivateRedis, down_s: float = 1.0, fresh: bool = False) -> None:
        super().__init__(down_s)
        self.broker = broker
        self.fresh = fresh
        self.kind = "broker restart (empty)" if fresh else "broker restart (on its data)"

    def _begin(self) -> str:
        self.broker.kill()
        return f"{self.kind}: redis-server SIGKILLed, back in {self.duration_s:g} s"

    def _end(self) -> None:
        if self.fresh:
            self.broker.wipe()
        for attempt in range(3):
            try:
                self.broker.start()
                return
            except BrokerNotStarted as exc:
                self._errors.append(f"{self.kind}: start attempt {attempt + 1}: {exc}")
        raise BrokerNotStarted("redis-server did not come back after 3 attempts")


class DbOutage(_TimedFault):
    """The database refuses the workers' connections (and cuts the open ones) for
    ``outage_s`` seconds."""

    kind = "db outage"

    def __init__(self, proxy: TcpProxy, outage_s: float) -> None:
        super().__init__(outage_s)
        self.proxy = proxy

    def _begin(self) -> str:
        self.proxy.refuse()
        return f"{self.kind}: PostgreSQL refused to the workers for {self.duration_s:g} s"

    def _end(self) -> None:
        self.proxy.accept()


def schedule(
    faults: Sequence[Fault], cycles: int, seed: int, avoid: set[int]
) -> dict[int, list[Fault]]:
    """Random distinct cycles in the middle 10-85 % of the run, one fault each, away from
    ``avoid`` (the worker kills). Its own generator: the run's sequence of operations is
    the same with or without faults scheduled."""
    rng = random.Random(seed * 7919 + 1)
    slots = [c for c in range(int(cycles * 0.1), max(int(cycles * 0.85), 1)) if c not in avoid]
    rng.shuffle(slots)
    plan: dict[int, list[Fault]] = {}
    for index, fault in enumerate(faults):
        cycle = slots[index % len(slots)] if slots else 0
        plan.setdefault(cycle, []).append(fault)
    return plan
