"""One repetition of ``bench/boot_bench.py`` on each side: boot N servers and wait until
every one is ACTIVE, then delete them and wait until every one is gone, timing each phase
and counting what it cost (SQL by step, broker connections).

The waits poll on the side: novaq's database through an engine of the bench's own (not
the product's, so its statements are not counted, and it never takes SQLite's write
lock), the bare app's results with one MGET. The settling before and after each phase
(until every process's counts stop moving) is outside the timed window.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Engine, bindparam, create_engine, func, select

from bench import bare_app, sql_counts
from bench.broker_stats import BrokerCounts, read_counts
from bench.heartbeat_probe import HeartbeatProbe
from models import Instance, InstanceFault

Counts = dict[str, dict[str, int]]
API = "api"  # the bucket of the public API's own statements (the bench's main thread)
POLL_S = 0.02


class RunFailed(Exception):
    """A boot that did not go ACTIVE, a delete that did not finish, a timeout."""


@dataclass
class Phase:
    """One phase (the boots or the deletes) of one repetition."""

    seconds: float
    count: int
    broker: BrokerCounts
    sql: Counts = field(default_factory=dict)
    call_ms: list[float] = field(default_factory=list)  # api.boot or the bare publish
    #: From the first call to the return of the last (the rest of ``seconds`` is waiting).
    issue_s: float = math.nan

    @property
    def per_s(self) -> float:
        return self.count / self.seconds


@dataclass
class Repetition:
    boots: Phase
    deletes: Phase
    heartbeat_ms: list[float] = field(default_factory=list)
    heartbeat_errors: list[str] = field(default_factory=list)


def _wait(what: str, done: Callable[[], bool], timeout_s: float, poll_s: float = POLL_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RunFailed(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def _api_cpu(phase: Phase, cpu_ns: int) -> None:
    """Record the CPU time of the public calls (the bench's thread, over its calls only:
    its waits for the outcome aside) under ``API``."""
    phase.sql.setdefault(API, dict.fromkeys(sql_counts.FIELDS, 0))["cpu_us"] = cpu_ns // 1000


def _without_cpu(counts: Counts) -> Counts:
    """The counts but CPU time, which moves as long as a process runs."""
    return {
        name: {f: v for f, v in values.items() if f != "cpu_us"} for name, values in counts.items()
    }


def _diff(after: Counts, before: Counts) -> Counts:
    return {
        name: {f: values[f] - before.get(name, {}).get(f, 0) for f in sql_counts.FIELDS}
        for name, values in after.items()
        if any(values[f] != before.get(name, {}).get(f, 0) for f in sql_counts.FIELDS)
    }


# -- novaq -----------------------------------------------------------------------------------
class NovaqSide:
    """novaq's cluster as the bench drives it: the public API in this process (its
    statements counted on this thread only), the workers' counts in ``counts_dir``."""

    def __init__(
        self,
        api: Any,
        db_url: str,
        counts_dir: Path,
        broker: redis.Redis,
        heartbeat_service_id: int,
        flavor: str,
        image: str,
    ) -> None:
        from models.db import engines_of, get_engine

        self.api, self.db_url, self.counts_dir, self.broker = api, db_url, counts_dir, broker
        self.heartbeat_service_id, self.flavor, self.image = heartbeat_service_id, flavor, image
        self.api_counter = sql_counts.Counter(None)
        self.api_counter.local.task = API
        self.api_counter.only_thread = _main_thread_id()
        for engine in engines_of(db_url):  # (SQLite's readers have an engine of their own)
            sql_counts.listen(self.api_counter, engine)
        self.poller: Engine = create_engine(get_engine(db_url).url, pool_size=1)

    def close(self) -> None:
        self.poller.dispose()

    def counts(self) -> Counts:
        totals = sql_counts.read_totals(self.counts_dir)
        totals[API] = self.api_counter.snapshot().get(API, dict.fromkeys(sql_counts.FIELDS, 0))
        return totals

    def settle(self, timeout_s: float = 15.0) -> Counts:
        """The counts once they stopped moving (every step's end is written)."""
        last = self.counts()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.6)  # three of the workers' dump intervals
            now = self.counts()
            if _without_cpu(now) == _without_cpu(last):
                return now
            last = now
        return last

    def _states(self, uuids: Sequence[str], live_only: bool) -> dict[str, int]:
        query = (
            select(Instance.vm_state, func.count())
            .where(Instance.uuid.in_(bindparam("uuids", expanding=True)))
            .group_by(Instance.vm_state)
        )
        if live_only:
            query = query.where(Instance.deleted == 0)
        with self.poller.connect() as conn:
            rows = conn.execute(query, {"uuids": list(uuids)}).all()
        return {str(state): n for state, n in rows}

    def _faults(self, uuids: Sequence[str]) -> list[str]:
        """The faults of the servers in ERROR (what a failed run says went wrong)."""
        query = (
            select(InstanceFault.host, InstanceFault.message, InstanceFault.details)
            .join(Instance, Instance.uuid == InstanceFault.instance_uuid)
            .where(Instance.uuid.in_(bindparam("uuids", expanding=True)))
            .where(Instance.vm_state == "error")
        )
        with self.poller.connect() as conn:
            rows = conn.execute(query, {"uuids": list(uuids)}).all()
        return [f"{host}: {message}\n{details or ''}" for host, message, details in rows]

    def _all(self, uuids: Sequence[str], wanted: str | None) -> Callable[[], bool]:
        def done() -> bool:
            states = self._states(uuids, live_only=wanted is None)
            if states.get("error"):
                faults = self._faults(uuids)
                raise RunFailed(f"{states['error']} server(s) went to ERROR: {states}; {faults}")
            if wanted is None:
                return not states
            return states.get(wanted, 0) == len(uuids)

        return done

    def run(self, label: str, n: int, timeout_s: float, heartbeat: bool = False) -> Repetition:
        """Boot ``n`` servers, then delete them; ``heartbeat``: with the heartbeat probe
        running during the boots (its writes are load the bare app does not get, so the
        throughput of such a run is not compared)."""
        before, broker_before = self.settle(), read_counts(self.broker)
        uuids: list[str] = []
        calls: list[float] = []
        probe = HeartbeatProbe(self.db_url, self.heartbeat_service_id)
        with probe if heartbeat else contextlib.nullcontext():
            started = time.perf_counter()
            boot_cpu_ns = time.thread_time_ns()
            for i in range(n):
                t = time.perf_counter()
                uuids += self.api.boot(f"{label}-{i}", self.flavor, self.image)
                calls.append((time.perf_counter() - t) * 1000)
            boot_cpu_ns = time.thread_time_ns() - boot_cpu_ns
            _wait(f"{n} servers ACTIVE", self._all(uuids, "active"), timeout_s)
            boot_s = time.perf_counter() - started
        middle, broker_middle = self.settle(), read_counts(self.broker)
        started = time.perf_counter()
        delete_cpu_ns = time.thread_time_ns()
        for uuid_ in uuids:
            self.api.delete(uuid_)
        delete_cpu_ns = time.thread_time_ns() - delete_cpu_ns
        issue_s = time.perf_counter() - started
        _wait(f"{n} servers deleted", self._all(uuids, None), timeout_s)
        delete_s = time.perf_counter() - started
        after, broker_after = self.settle(), read_counts(self.broker)
        boots = Phase(boot_s, n, broker_middle - broker_before, _diff(middle, before), calls)
        deletes = Phase(
            delete_s, n, broker_after - broker_middle, _diff(after, middle), issue_s=issue_s
        )
        _api_cpu(boots, boot_cpu_ns)
        _api_cpu(deletes, delete_cpu_ns)
        return Repetition(boots, deletes, probe.latencies_ms, probe.errors)


def _main_thread_id() -> int:
    return threading.main_thread().ident or 0


# -- the bare app ----------------------------------------------------------------------------
class BareSide:
    """The bare app of ``bench/bare_app.py``, published from this process."""

    def __init__(
        self,
        app: Any,
        hosts: Sequence[str],
        broker: redis.Redis,
        results: redis.Redis,
        counts_dir: Path,
    ):
        self.app, self.hosts, self.broker, self.results = app, list(hosts), broker, results
        self.counts_dir = counts_dir

    def counts(self) -> Counts:
        return sql_counts.read_totals(self.counts_dir)

    def _all_done(self, ids: Sequence[str]) -> Callable[[], bool]:
        keys = [f"celery-task-meta-{task_id}" for task_id in ids]

        def done() -> bool:
            values = self.results.mget(keys)
            if any(v is not None and b'"FAILURE"' in v for v in values):
                raise RunFailed("a bare step failed")
            return all(v is not None and b'"SUCCESS"' in v for v in values)

        return done

    def run(
        self, n: int, timeout_s: float, durable: str | None = None, guest: bool = False
    ) -> Repetition:
        """Boot ``n`` servers, then delete them; ``durable``: as the durable bare app,
        recording each state in the run's database of that kind (``bare_app.record``),
        its servers with a guest if ``guest`` (``bench/bare_guest.py``)."""
        target, extra = bare_app.target_of(durable), bare_app.durable_kwargs(durable, guest)
        time.sleep(0.5)  # what the last phase sent is acknowledged
        broker_before, before = read_counts(self.broker), self.counts()
        servers = [str(uuid.uuid4()) for _ in range(n)]
        calls: list[float] = []
        ids = []
        started = time.perf_counter()
        boot_cpu_ns = time.thread_time_ns()
        for i, server in enumerate(servers):
            t = time.perf_counter()
            kwargs = {"instance_uuid": server, "request_id": f"req-{server}", "index": i}
            kwargs.update(extra)
            bare_app.record(server, "building", target)
            ids.append(self.app.signature("scheduler.bare_select", kwargs=kwargs).apply_async().id)
            calls.append((time.perf_counter() - t) * 1000)
        boot_cpu_ns = time.thread_time_ns() - boot_cpu_ns
        _wait(f"{n} bare boots", self._all_done(ids), timeout_s)
        boot_s = time.perf_counter() - started
        time.sleep(0.5)
        broker_middle, middle = read_counts(self.broker), self.counts()
        ids = []
        started = time.perf_counter()
        delete_cpu_ns = time.thread_time_ns()
        for i, server in enumerate(servers):
            host = self.hosts[i % len(self.hosts)]
            kwargs = {"instance_uuid": server, "request_id": f"req-d-{server}", "host": host}
            kwargs.update(extra)
            bare_app.record(server, "deleting", target)
            ids.append(self.app.signature("compute.bare_delete", kwargs=kwargs).apply_async().id)
        delete_cpu_ns = time.thread_time_ns() - delete_cpu_ns
        issue_s = time.perf_counter() - started
        _wait(f"{n} bare deletes", self._all_done(ids), timeout_s)
        delete_s = time.perf_counter() - started
        time.sleep(0.5)
        broker_after, after = read_counts(self.broker), self.counts()
        boots = Phase(boot_s, n, broker_middle - broker_before, _diff(middle, before), calls)
        deletes = Phase(
            delete_s, n, broker_after - broker_middle, _diff(after, middle), issue_s=issue_s
        )
        _api_cpu(boots, boot_cpu_ns)
        _api_cpu(deletes, delete_cpu_ns)
        return Repetition(boots, deletes)
