"""Heartbeats before writers on SQLite: a gate file beside the database.

SQLite has one write lock and no queue. A writer that finds it taken sleeps in the busy
handler's growing steps; under load the lock is held almost all the time, and a writer
that has just committed often begins its next transaction before any sleeper wakes. A
heartbeat (``models.db.liveness_write``) that polls the lock every millisecond still
lost that race 17-29 times in a row at p95, and a heartbeat that waits makes a busy host
look down.

So a heartbeat that finds the lock taken **closes the gate**: it takes an exclusive
``flock`` on ``<database>-gate``. Writers look at the gate before their ``BEGIN
IMMEDIATE`` (``wait_until_open``): while it is closed they wait, so the heartbeat waits
only for the transactions already begun. Both sides are bounded: the heartbeat keeps the
gate closed for at most ``HOLD_S``, and a writer waits at most ``HOLD_S`` for it to
open, so a heartbeat's process that is stopped (not killed: the kernel drops a dead
process's locks) holds nobody up for longer than that.

NOTE: a look costs two ``flock`` calls that do not block (about 2 µs). Writers poll a
closed gate instead of blocking on it, so that the bound above holds; they poll only
while a heartbeat is waiting, a few milliseconds a few times a second.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator

#: The longest a heartbeat keeps the gate closed, and a writer waits for it to open.
HOLD_S = 0.1
#: How often a writer looks again at a closed gate.
POLL_S = 0.0005


class Gate:
    """The gate of one SQLite database file, as seen by this process.

    NOTE: ``flock`` locks belong to an open file description, so the writers' side and
    the heartbeats' side each open the file (two descriptions: a heartbeat's exclusive
    lock then shuts out this process's own writers too), and each process opens it anew
    (a description inherited through fork is shared with the parent: a child that
    opened the gate through it would open its parent's; ``forget_inherited``)."""

    def __init__(self, database: str) -> None:
        self.path = f"{database}-gate"
        self._fds: dict[str, tuple[int, int]] = {}  # side -> (pid, fd)
        self._lock = threading.Lock()

    def _fd(self, side: str) -> int:
        pid = os.getpid()
        known = self._fds.get(side)
        if known is not None and known[0] == pid:
            return known[1]
        with self._lock:
            known = self._fds.get(side)
            if known is None or known[0] != pid:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                known = self._fds[side] = (pid, fd)
            return known[1]

    def forget_inherited(self) -> None:
        """In a child just forked: close the descriptions inherited from the parent.

        NOTE: a lock on a description lasts until the last descriptor of it is closed, so
        a child that kept its parent's would keep the gate closed (writers slowed by
        ``HOLD_S`` each) after a parent killed while it held it. Closing a copy does not
        drop the parent's lock."""
        for _pid, fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        self._lock = threading.Lock()  # another thread may have held it at the fork

    def wait_until_open(self) -> None:
        """Return once no heartbeat holds the gate, or after ``HOLD_S`` at most."""
        fd = self._fd("writers")
        deadline = 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                now = time.monotonic()
                if not deadline:
                    deadline = now + HOLD_S
                elif now >= deadline:
                    return
                time.sleep(POLL_S)
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
            return

    @contextlib.contextmanager
    def closed(self) -> Iterator[ClosedGate]:
        """Close the gate for the block (if no other heartbeat holds it), up to ``HOLD_S``:
        the block calls ``still_closed()`` between its tries, which opens it after that."""
        fd = self._fd("heartbeats")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another heartbeat holds it: writers wait for it already
            yield ClosedGate(None)
            return
        held = ClosedGate(fd)
        try:
            yield held
        finally:
            held.open()


class ClosedGate:
    """A heartbeat's hold on the gate (``fd`` None: it holds nothing)."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._until = time.monotonic() + HOLD_S

    def still_closed(self) -> None:
        """Open the gate once it has been closed for ``HOLD_S``."""
        if self._fd is not None and time.monotonic() >= self._until:
            self.open()

    def open(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._fd = None


_GATES: dict[str, Gate] = {}
_GATES_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _GATES_LOCK
    _GATES_LOCK = threading.Lock()
    for gate in _GATES.values():
        gate.forget_inherited()


os.register_at_fork(after_in_child=_after_fork_in_child)


def gate_of(database: str | None) -> Gate | None:
    """The gate of SQLite database file ``database`` (None for an in-memory database,
    which one process alone writes)."""
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    gate = _GATES.get(database)
    if gate is None:
        with _GATES_LOCK:
            gate = _GATES.setdefault(database, Gate(database))
    return gate
