"""tenacity for work that almost always succeeds at once: the first try runs bare, and a
``Retrying`` is built only once it failed (issue 16: building one per call cost more CPU
than many of the transactions it wrapped)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import Retrying

T = TypeVar("T")


def after_first_try(retrying: Retrying, fn: Callable[[], T], first: BaseException) -> T:
    """``retrying(fn)`` when a first call of ``fn`` already raised ``first``: tenacity
    takes that failure as its own first attempt (its retry test, stop, wait and log see
    it), then calls ``fn`` from the second attempt on."""
    pending = [first]

    def again() -> T:
        if pending:
            raise pending.pop()
        return fn()

    return retrying(again)
