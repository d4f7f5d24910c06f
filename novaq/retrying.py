"""tenacity for work that almost always succeeds at once: the first try runs bare, and a
``Retrying`` is built only once it failed (issue 16: building one per call cost more CPU
than many of the transactions it wrapped)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import Retrying

T = TypeVar("T")


def after_first_try(
    retrying: Retrying, first: BaseException, fn: Callable[..., T], *args: Any
) -> T:
    """``retrying(fn, *args)`` when a first call of ``fn(*args)`` already raised
    ``first``: tenacity takes that failure as its own first attempt (its retry test,
    stop, wait and log see it, the log naming ``fn``), then calls ``fn`` from the second
    attempt on."""
    pending = [first]

    @functools.wraps(fn)
    def again(*args: Any) -> T:
        if pending:
            raise pending.pop()
        return fn(*args)

    return retrying(again, *args)
