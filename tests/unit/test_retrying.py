"""``novaq.retrying.after_first_try``: a ``Retrying`` built after a first failed try
treats that failure as its first attempt (stop, wait and log count it), then calls
again."""

from __future__ import annotations

import pytest
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from novaq.retrying import after_first_try


class Flaky:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError(f"down ({self.calls})")
        return "answer"


def _retrying(attempts: int, slept: list[int]) -> Retrying:
    def note(state: RetryCallState) -> None:
        slept.append(state.attempt_number)

    return Retrying(
        retry=retry_if_exception_type(ConnectionError),
        stop=stop_after_attempt(attempts),
        wait=lambda state: 0,
        before_sleep=note,
        reraise=True,
    )


def test_the_first_failure_counts_as_the_first_attempt() -> None:
    flaky = Flaky(2)
    try:
        flaky()
    except ConnectionError as exc:
        first = exc
    slept: list[int] = []
    assert after_first_try(_retrying(5, slept), first, flaky) == "answer"
    assert flaky.calls == 3 and slept == [1, 2]  # a wait after each failed try


def test_the_attempts_include_the_first_try() -> None:
    flaky = Flaky(10)
    try:
        flaky()
    except ConnectionError as exc:
        first = exc
    slept: list[int] = []
    with pytest.raises(ConnectionError, match=r"down \(3\)"):
        after_first_try(_retrying(3, slept), first, flaky)
    assert flaky.calls == 3 and slept == [1, 2]
