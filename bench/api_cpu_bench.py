"""The CPU of ``api.boot`` and ``api.delete`` in one process (thread CPU time), with the
bare publish of the same boot message interleaved, for A/B runs of two worktrees.

    PYTHONPATH=<worktree> .venv/bin/python bench/api_cpu_bench.py \
        --broker redis://127.0.0.1:6379/11 [--ops 300] [--profile boot|delete]

Each round boots one server, publishes the bare message, and deletes one server placed on
a host that is up (written as the tests write it, outside the measure). Prints medians and
minimums in ms; ``--profile`` prints cProfile's top functions for one of the calls.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # Last: a PYTHONPATH naming another worktree (an A/B run) still comes first.
    sys.path.append(str(ROOT))

STATE = Path(tempfile.mkdtemp(prefix="novaq-apicpu-"))
atexit.register(shutil.rmtree, STATE, ignore_errors=True)  # (a run leaves no state dir)


def _configure(broker: str) -> str:
    for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
        del os.environ[name]
    url = f"sqlite:///{STATE}/api.sqlite"
    os.environ.update(
        NOVAQ_STATE_DIR=str(STATE),
        NOVAQ_DATABASE_URL=url,
        NOVAQ_BROKER_URL=broker,
        NOVAQ_RESULT_BACKEND=broker,
    )
    return url


def _bare_publish(app: Any, spec: dict[str, Any]) -> None:
    signature = app.signature(
        "scheduler.select_destinations",
        kwargs={
            "request_id": f"req-{uuid.uuid4()}",
            "instance_uuids": [spec["instance_uuid"]],
            "request_spec": spec,
        },
        queue="scheduler",
    )
    signature.on_error(app.signature("scheduler.on_build_error"))
    signature.apply_async()


def _place(url: str, uuids: list[str]) -> None:
    """The booted servers as if built on host1 (outside the measure)."""
    from sqlalchemy import update

    from models import Instance, utcnow
    from models.db import session_scope

    with session_scope(url) as session:
        session.execute(
            update(Instance)
            .where(Instance.uuid.in_(uuids))
            .values(
                host="host1", node="host1", vm_state="active", task_state=None, launched_at=utcnow()
            )
        )


def _before_awaited(awaited: bool) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _before_broker_errors() -> tuple[type[BaseException], ...]:
    from workflows import dispatch

    return (*dispatch._BROKER_ERRORS, *dispatch._pool().connection.channel_errors)


#: What ``--ab`` patches in for its "before" rounds: this pass's changes undone.
BEFORE: list[Any] = [
    lambda: mock.patch("workflows.dispatch._awaited", _before_awaited),
    lambda: mock.patch("workflows.dispatch.broker_errors", _before_broker_errors),
]


class Rounds:
    """Boot, bare publish, delete: one round at a time, each call's thread CPU kept."""

    def __init__(self, url: str, profile: str | None) -> None:
        from novaq.celery_app import app
        from tests.factories import make_compute_node, register_cirros
        from workflows import api
        from workflows.api import common

        self.url, self.app, self.api = url, app, api
        register_cirros(url, common.settings().image_store_path)
        make_compute_node(url, "host1")
        api.create_flavor("bench", 1, 512, 1)
        warm = api.boot("warm", "bench", "cirros", count=20)
        _place(url, warm)
        for u in warm[:10]:
            api.delete(u)
        self.spare = warm[10:]
        flavor = api.show(warm[0])["flavor"]
        self.spec = {"instance_uuid": warm[0], "flavor": flavor, "image": "cirros"}
        self.profile = profile
        self.profiler = cProfile.Profile(time.thread_time) if profile else None

    def _timed(self, name: str, call: Any) -> tuple[Any, float]:
        profiling = self.profiler is not None and self.profile == name
        if profiling:
            self.profiler.enable()
        started = time.thread_time()
        result = call()
        took = time.thread_time() - started
        if profiling:
            self.profiler.disable()
        return result, took

    def run(self, i: int, figures: dict[str, list[float]]) -> None:
        [booted], took = self._timed("boot", lambda: self.api.boot(f"b{i}", "bench", "cirros"))
        figures["boot"].append(took)
        self.spec["instance_uuid"] = str(uuid.uuid4())
        figures["bare"].append(self._timed("bare", lambda: _bare_publish(self.app, self.spec))[1])
        _place(self.url, [booted])
        victim = self.spare.pop(0)
        self.spare.append(booted)
        figures["delete"].append(self._timed("delete", lambda: self.api.delete(victim))[1])


def _figures() -> dict[str, list[float]]:
    return {"boot": [], "bare": [], "delete": []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--profile", choices=("boot", "delete"))
    parser.add_argument("--ab", action="store_true", help="every other round with BEFORE")
    parser.add_argument("--callees", default=r"boot.py.*\(boot\)|servers.py.*\(delete\)")
    args = parser.parse_args()
    url = _configure(args.broker)
    from models.db import dispose_all
    from models.migrate import upgrade
    from novaq.celery_app import app

    upgrade(url)
    runs = {"after ": _figures(), "before ": _figures()} if args.ab else {"": _figures()}
    try:
        rounds = Rounds(url, args.profile)
        for i in range(args.ops * len(runs)):
            with contextlib.ExitStack() as undo:
                if args.ab and i % 2:
                    for patch in BEFORE:
                        undo.enter_context(patch())
                rounds.run(i, list(runs.values())[i % len(runs)])
        for name, figures in runs.items():
            for label, values in figures.items():
                print(
                    f"{name}{label:7s} median {statistics.median(values) * 1e3:6.3f} ms"
                    f"  min {min(values) * 1e3:6.3f} ms"
                )
        if rounds.profiler:
            stats = pstats.Stats(rounds.profiler).sort_stats("cumulative")
            stats.print_stats(45)
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_callees(args.callees)
    finally:
        with app.connection_for_write() as conn:
            for queue in ("scheduler", "compute.host1"):
                conn.SimpleQueue(queue).clear()
        dispose_all()
        shutil.rmtree(STATE, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
