"""The Nova side of the differential tier: one of this folder's ``nova_*.py`` scripts run
by the Python of Nova's own virtualenv (``scripts/nova-venv`` makes it on first use under
``.cache/nova-venv``: nova is no dependency of novaq), asked in JSON lines.

Each script first says hello (one line: what it can answer), then answers each
``{"cases": [...]}`` line with one line holding the answers under its own key."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


class NovaProcess:
    """One of Nova's scripts in a subprocess, asked a batch of cases at a time."""

    def __init__(self, python: str, script: str) -> None:
        self.script = script
        self.process = subprocess.Popen(
            [python, str(Path(__file__).with_name(script))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            # One hash seed: Nova walks sets of aggregate values in their iteration order
            # (see known_divergences), which must not change from run to run.
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"Nova's {self.script} ended ({self.process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, cases: list[dict[str, Any]], key: str) -> list[Any]:
        """Nova's answers to ``cases``, in order (the reply's ``key``)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"cases": cases}) + "\n")
        self.process.stdin.flush()
        answers: list[Any] = self._read()[key]
        return answers

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def nova_python() -> str:
    """The Python of Nova's virtualenv (made on first use); fails the test if it cannot be."""
    made = subprocess.run(
        [str(ROOT / "scripts" / "nova-venv")], capture_output=True, text=True, check=False
    )
    if made.returncode != 0:
        pytest.fail(f"scripts/nova-venv failed: {made.stderr[-2000:]}")
    return made.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def nova_process(script: str) -> Iterator[NovaProcess]:
    side = NovaProcess(nova_python(), script)
    try:
        yield side
    finally:
        side.close()


class Nova:
    """Nova's filter verdicts (``nova_verdicts.py``)."""

    def __init__(self, side: NovaProcess) -> None:
        self.side = side
        # Nova's filter classes, and what Nova 34 does before placement instead of a filter.
        self.filters = set(side.hello["filters"]) | set(side.hello.get("placement", []))

    def verdicts(self, cases: list[dict[str, Any]]) -> list[bool | str]:
        return self.side.ask(cases, "verdicts")
