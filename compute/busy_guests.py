"""The instances this process's host steps are acting on with a task_state set: from
the commit of a step's begin (whose compare-and-swap set or kept a task_state that is
not None) to the end of its ``act``, before any finish or undo can clear it.

While an instance is here its row has a task_state, so Nova's lifecycle-event handling
would read it only to find "a pending task" and skip (``compute.lifecycle_events``): the
guest's events during the worker's own change (every boot's Started) are answered from
here without a database read (issue 16). Only a step's own undo, finish or a delete
that finished meanwhile could clear the task, and each runs after the entry is gone or
removes the row (the sync would skip it as gone).

Process-local and thread-safe (a threads-pool worker runs several steps at once; a
prefork child has its own).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator

_lock = threading.Lock()
#: instance uuid -> the task_state the (first) begin left, and how many steps hold it.
_tasks: dict[str, str] = {}
_holders: Counter[str] = Counter()


@contextlib.contextmanager
def acting(instance_uuid: str, task_state: str) -> Iterator[None]:
    """Record ``instance_uuid`` as busy with ``task_state`` for the block."""
    with _lock:
        _tasks.setdefault(instance_uuid, task_state)
        _holders[instance_uuid] += 1
    try:
        yield
    finally:
        with _lock:
            _holders[instance_uuid] -= 1
            if _holders[instance_uuid] <= 0:
                del _holders[instance_uuid]
                _tasks.pop(instance_uuid, None)


def task_of(instance_uuid: str) -> str | None:
    """The task_state a step of this process holds on the instance, or None."""
    with _lock:
        return _tasks.get(instance_uuid)
