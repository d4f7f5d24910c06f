"""novaq's filters against Nova 34's own, verdict by verdict, on randomized host states and
requests (``tests/differential/cases.py``). Nova runs in its own virtualenv
(``scripts/nova-venv``, made on first use: nova is no dependency of novaq) as a
subprocess answering in JSON lines (``tests/differential/nova_verdicts.py``).

An image Nova's objects refuse to build (metadata Nova's API refuses before scheduling)
must be refused by novaq's image store too (``workflows.api.images_store``); where Nova's
filter raises (a bug there: the whole request fails), novaq's must refuse the host; for
every other case the two filters must say the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from novaq.exceptions import InvalidImage
from scheduler.filters import load_filters
from tests.differential.cases import hosts, novaq_host, novaq_settings, novaq_spec, requests
from workflows.api.images_store import check_properties

ROOT = Path(__file__).resolve().parents[2]
FILTERS = [
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "SameHostFilter",
    "DifferentHostFilter",
    "NumInstancesFilter",
    "IoOpsFilter",
    "AggregateIoOpsFilter",
    "AggregateNumInstancesFilter",
    "AggregateTypeAffinityFilter",
    "AllHostsFilter",
]
BATCH = 40
EXAMPLES = int(os.environ.get("NOVAQ_DIFFERENTIAL_EXAMPLES", "15"))


class Nova:
    """The Nova side: one subprocess, asked a batch of cases at a time."""

    def __init__(self, python: str) -> None:
        self.process = subprocess.Popen(
            [python, str(Path(__file__).with_name("nova_verdicts.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.filters = set(self._read()["filters"])

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"Nova's verdict process ended ({self.process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def verdicts(self, cases: list[dict[str, Any]]) -> list[bool | str]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"cases": cases}) + "\n")
        self.process.stdin.flush()
        verdicts: list[bool | str] = self._read()["verdicts"]
        return verdicts

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture(scope="module")
def nova() -> Iterator[Nova]:
    made = subprocess.run(
        [str(ROOT / "scripts" / "nova-venv")], capture_output=True, text=True, check=False
    )
    if made.returncode != 0:
        pytest.fail(f"scripts/nova-venv failed: {made.stderr[-2000:]}")
    side = Nova(made.stdout.strip().splitlines()[-1])
    yield side
    side.close()


def _novaq_verdict(name: str, case: dict[str, Any]) -> bool | str:
    try:
        check_properties(case["request"]["image_properties"])
    except InvalidImage as exc:
        return f"invalid: {exc}"
    (flt,) = load_filters(novaq_settings(), [name])
    return flt.host_passes(novaq_host(case["host"]), novaq_spec(case["request"]))


def _same(novaq: bool | str, nova: bool | str) -> bool:
    if isinstance(nova, str) and nova.startswith("raised:"):
        # Nova's filter raised (e.g. a numeric operator on a text capability), which
        # fails Nova's whole request; novaq refuses that host instead (the filters'
        # docstrings say so). Either way the host is not chosen.
        return novaq is False
    if isinstance(novaq, str) or isinstance(nova, str):
        return isinstance(novaq, str) and isinstance(nova, str)  # both refuse the image
    return novaq == nova


def test_nova_has_every_filter_compared(nova: Nova) -> None:
    assert set(FILTERS) <= nova.filters


# A failing batch's repr is long: the assertion's message names the one case that differs.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@pytest.mark.parametrize("name", FILTERS)
def test_the_filter_gives_nova_s_verdicts(nova: Nova, name: str) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        # No shrinking: each step would ask Nova again; the message names the one case.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(st.tuples(hosts(), requests()), min_size=BATCH, max_size=BATCH))
    def agree(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        cases = [{"filter": name, "host": h, "request": r} for h, r in pairs]
        theirs = nova.verdicts(cases)
        for case, nova_says in zip(cases, theirs, strict=True):
            novaq_says = _novaq_verdict(name, case)
            assert _same(novaq_says, nova_says), (
                f"{name}: novaq {novaq_says!r}, Nova {nova_says!r}\n"
                f"host={json.dumps(case['host'])}\nrequest={json.dumps(case['request'])}"
            )

    agree()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
