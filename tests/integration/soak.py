"""The leak soak: random boots, deletes and moves (and, in the long form, stops, starts and
reboots) on real workers, with spawn failures injected, a compute worker SIGKILLed and
restarted mid-run, and optionally faults of the broker and the database
(``soak_faults``); then nothing may be stuck or lost and the accounting must be exact.

Used in a short form by ``test_leak_soak.py`` and in a long form by ``bench/leak_soak.py``.

Every wait is bounded: a server that has not settled by the deadline is reported as stuck
(with its states, host, last action and event, migration), a request the API accepted
whose action never finished is reported as lost, and the run goes on to the audit.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.integration import soak_faults
from tests.integration.soak_faults import Fault
from tests.integration.soak_findings import (
    FaultWindow,
    Request,
    describe_server,
    fault_context,
    open_events,
    stuck_line,
    unfinished,
    usage_mismatches,
)
from tests.integration.workers import Cluster

SETTLED = {"ACTIVE", "ERROR", "DELETED", "SHUTOFF"}
FLAVORS = (("soak.small", 1, 512, 1), ("soak.medium", 2, 1024, 2), ("soak.large", 4, 4096, 5))
#: Upper bounds of the roll for delete, move, power operation; the rest boots.
MIX = (0.35, 0.55, 0.55)
MIX_WITH_POWER = (0.30, 0.45, 0.60)
#: How long a fault may take to end beyond its own duration before the soak goes on.
FAULT_GRACE_S = 60.0
#: How long restarted workers may take to answer a ping.
READY_TIMEOUT_S = 60.0


@dataclass
class SoakReport:
    #: Requests the API accepted, per kind (a boot of N servers counts N).
    operations: Counter[str] = field(default_factory=Counter)
    #: Requests the API refused, as "kind: error".
    refused: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    #: The fault messages of the servers in ERROR.
    faults: Counter[str] = field(default_factory=Counter)
    #: Faults injected, per kind ("worker SIGKILL", "broker restart ...", "db outage").
    injected: Counter[str] = field(default_factory=Counter)
    fault_log: list[str] = field(default_factory=list)
    #: What went wrong with a fault itself, or with the cluster around one.
    fault_errors: list[str] = field(default_factory=list)
    #: Workers that died without the soak killing them (each restarted once faults end).
    worker_exits: list[str] = field(default_factory=list)
    kills: int = 0
    seconds: float = 0.0
    settle_seconds: float = 0.0
    audit_live: dict[str, Any] = field(default_factory=dict)
    usage_mismatches_live: list[str] = field(default_factory=list)
    audit: dict[str, Any] = field(default_factory=dict)
    usage_mismatches: list[str] = field(default_factory=list)
    #: One line per server and phase that did not settle by the deadline.
    stuck: list[str] = field(default_factory=list)
    stuck_details: list[dict[str, Any]] = field(default_factory=list)
    #: Requests accepted whose action never finished (nor was superseded).
    lost: list[str] = field(default_factory=list)
    lost_kinds: Counter[str] = field(default_factory=Counter)
    #: Lost requests by the fault they met ("during db outage", "after ...", ...).
    lost_by_fault: Counter[str] = field(default_factory=Counter)
    windows: list[FaultWindow] = field(default_factory=list)
    #: Instance-action events that never ended (a gap in the record, not a loss).
    open_events: set[str] = field(default_factory=set)
    #: Servers of the soak it was never told about (written by a refused request).
    unknown_servers: list[str] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)


def ensure_flavors(api: Any) -> None:
    existing = {f["name"] for f in api.list_flavors()}
    for name, vcpus, memory_mb, root_gb in FLAVORS:
        if name not in existing:
            api.create_flavor(name, vcpus, memory_mb, root_gb)


def run_soak(
    api: Any,
    cluster: Cluster,
    victim: str,
    cycles: int,
    kills: int,
    seed: int = 7,
    settle_timeout_s: float = 120.0,
    down_s: float = 0.5,
    faults: Sequence[Fault] = (),
    power_ops: bool = False,
    log: Callable[[str], None] | None = None,
) -> SoakReport:
    """``down_s``: how long the victim stays dead. Past ``service_down_time`` the API
    deletes its servers locally meanwhile, and its restart meets their guests.
    ``faults`` are injected once each at random cycles; ``power_ops`` adds stop, start
    and reboot to the mix."""
    soak = Soak(api, cluster, victim, seed, settle_timeout_s, down_s, power_ops, log)
    soak.run(cycles, kills, faults)
    return soak.report


class Soak:
    """One run; ``report`` holds what is known so far even if the run raises."""

    def __init__(
        self,
        api: Any,
        cluster: Cluster,
        victim: str,
        seed: int = 7,
        settle_timeout_s: float = 120.0,
        down_s: float = 0.5,
        power_ops: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.api, self.cluster, self.victim = api, cluster, victim
        self.seed, self.settle_timeout_s, self.down_s = seed, settle_timeout_s, down_s
        self.power_ops = power_ops
        self.mix = MIX_WITH_POWER if power_ops else MIX
        self.log = log or (lambda line: None)
        self.rng = random.Random(seed)
        self.report = SoakReport()
        self.live: list[str] = []
        self.every: list[str] = []
        self.resizing: set[str] = set()
        self.faults: list[Fault] = []
        self.dead: set[str] = set()
        self.cycle = 0
        self.started = time.monotonic()

    # -- the run ----------------------------------------------------------------------

    def run(self, cycles: int, kills: int, faults: Sequence[Fault] = ()) -> None:
        ensure_flavors(self.api)
        self.faults = list(faults)
        kill_at = {int(cycles * (k + 1) / (kills + 1)) for k in range(kills)}
        plan = soak_faults.schedule(self.faults, cycles, self.seed, kill_at)
        self.started = time.monotonic()
        for cycle in range(cycles):
            self.cycle = cycle
            self._supervise()
            for fault in plan.get(cycle, []):
                self._inject(cycle, fault)
            if cycle in kill_at:
                self._kill_victim(cycle)
            self._resolve_one()
            self._operate(cycle)
            time.sleep(self.rng.uniform(0, 0.05))
            if cycles >= 10 and (cycle + 1) % (cycles // 10) == 0:
                self.log(f"cycle {cycle + 1}/{cycles} {self._elapsed()}: {self._tally()}")
        self.report.seconds = time.monotonic() - self.started
        self._recover_cluster()
        self._finish()

    def _operate(self, cycle: int) -> None:
        roll = self.rng.random()
        if self.live and roll < self.mix[0]:
            index = self.rng.randrange(len(self.live))
            uuid = self.live[index]
            if self._request("delete", uuid, self.api.delete, uuid, cycle=cycle):
                self.live.pop(index)
                self.resizing.discard(uuid)
        elif self.live and roll < self.mix[1]:
            self._try_move(self.rng.choice(self.live), cycle)
        elif self.live and roll < self.mix[2]:
            self._try_power(self.rng.choice(self.live), cycle)
        else:
            name = self.rng.choice(FLAVORS)[0]
            self._boot(f"soak-{cycle}", name, self.rng.choice((1, 1, 2)), cycle)

    def _boot(self, name: str, flavor: str, count: int, cycle: int) -> list[str]:
        sent_s = self._now()
        try:
            uuids: list[str] = self.api.boot(name, flavor, "cirros", count=count)
        except Exception as exc:  # noqa: BLE001 - a refusal during a fault is counted
            self.report.refused[f"boot: {type(exc).__name__}"] += 1
            return []
        self.live.extend(uuids)
        self.every.extend(uuids)
        self.report.operations["boot"] += len(uuids)
        self.report.requests.extend(Request("boot", u, None, cycle, sent_s) for u in uuids)
        return uuids

    def _request(
        self, kind: str, uuid: str, call: Callable[..., Any], *args: Any, cycle: int
    ) -> bool:
        """Send one request; count it as accepted (and remember it) or as refused."""
        sent_s = self._now()
        try:
            request_id = call(*args)
        except Exception as exc:  # noqa: BLE001 - a state race or a fault's refusal
            self.report.refused[f"{kind}: {type(exc).__name__}"] += 1
            return False
        self.report.operations[kind] += 1
        rid = request_id if isinstance(request_id, str) else None
        self.report.requests.append(Request(kind, uuid, rid, cycle, sent_s))
        return True

    def _try_move(self, uuid: str, cycle: int) -> None:
        view = self.api.show(uuid)
        movable = ("ACTIVE", "SHUTOFF") if self.power_ops else ("ACTIVE",)
        if view["status"] not in movable or view["task_state"] is not None:
            return
        if uuid in self.resizing:
            return
        choices = [f[0] for f in FLAVORS if f[0] != view["flavor"]["name"]]
        if self.rng.random() < 0.3:
            accepted = self._request("migrate", uuid, self.api.migrate, uuid, cycle=cycle)
        else:
            flavor = self.rng.choice(choices)
            accepted = self._request("resize", uuid, self.api.resize, uuid, flavor, cycle=cycle)
        if accepted:
            self.resizing.add(uuid)

    def _try_power(self, uuid: str, cycle: int) -> None:
        view = self.api.show(uuid)
        if view["task_state"] is not None or uuid in self.resizing:
            return
        if view["status"] == "SHUTOFF":
            self._request("start", uuid, self.api.start, uuid, cycle=cycle)
        elif view["status"] == "ACTIVE" and self.rng.random() < 0.7:
            self._request("stop", uuid, self.api.stop, uuid, cycle=cycle)
        elif view["status"] == "ACTIVE":
            hard = self.rng.random() < 0.5
            kind = "reboot (hard)" if hard else "reboot"
            self._request(kind, uuid, self.api.reboot, uuid, hard, cycle=cycle)

    def _resolve_one(self, force: bool = False) -> None:
        """Confirm or revert one resize that reached VERIFY_RESIZE; forget ended ones."""
        for uuid in list(self.resizing):
            view = self.api.show(uuid)
            if view["task_state"] is None and view["status"] in ("ACTIVE", "SHUTOFF", "ERROR"):
                self.resizing.discard(uuid)
                continue
            if view["status"] == "DELETED" and view["task_state"] is None:
                self.resizing.discard(uuid)
                continue
            if view["status"] == "VERIFY_RESIZE" and view["task_state"] is None:
                if self.rng.random() < 0.5:
                    self._request("confirm", uuid, self.api.confirm_resize, uuid, cycle=self.cycle)
                else:
                    self._request("revert", uuid, self.api.revert_resize, uuid, cycle=self.cycle)
                self.resizing.discard(uuid)
                return
        if force and self.resizing:
            time.sleep(0.2)

    # -- faults -----------------------------------------------------------------------

    def _now(self) -> float:
        return time.monotonic() - self.started

    def _elapsed(self) -> str:
        return f"t={self._now():.1f}s"

    def _wait_faults_over(self) -> None:
        """One fault at a time: wait (bounded) until the ones injected before have ended."""
        for fault in self.faults:
            if fault.active() and not fault.wait_over(_bound(fault)):
                self.report.fault_errors.append(f"{fault.kind}: still in effect after its bound")

    def _inject(self, cycle: int, fault: Fault) -> None:
        self._wait_faults_over()
        self._supervise()
        # A burst first, so the fault lands while steps are in flight.
        self._boot(f"soak-burst-{cycle}", FLAVORS[0][0], 6, cycle)
        time.sleep(self.rng.uniform(0.0, 0.08))
        window = FaultWindow(fault.kind, self._now())
        self.report.windows.append(window)

        def ended(line: str) -> None:
            window.end_s = self._now()
            self._note(f"{self._elapsed()}: {line}")

        line = fault.inject(ended)
        self.report.injected[fault.kind] += 1
        self._note(f"cycle {cycle} {self._elapsed()}: {line}")

    def _kill_victim(self, cycle: int) -> None:
        self._wait_faults_over()
        # A burst first, so the kill lands while steps are in flight on the victim.
        self._boot(f"soak-burst-{cycle}", FLAVORS[0][0], 6, cycle)
        time.sleep(self.rng.uniform(0.0, 0.08))
        worker = self.cluster.workers[self.victim]
        window = FaultWindow("worker SIGKILL", self._now())
        self.report.windows.append(window)
        worker.stop(signal.SIGKILL)
        self.report.kills += 1
        self.report.injected["worker SIGKILL"] += 1
        self._note(f"cycle {cycle} {self._elapsed()}: worker {self.victim} SIGKILLed")
        time.sleep(self.down_s)
        worker.start()
        self._wait_ready({f"compute@{self.victim}"})
        window.end_s = self._now()

    def _tally(self) -> str:
        accepted = sum(self.report.operations.values())
        return f"{accepted} requests accepted, {sum(self.report.refused.values())} refused"

    def _note(self, line: str) -> None:
        self.report.fault_log.append(line)
        self.log(line)

    def _wait_ready(self, nodes: set[str], timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait (bounded) until ``nodes`` answer a ping. A worker found dead meanwhile is
        reported and restarted; a broker error on the way (this process's connection from
        before a broker restart) is retried, not raised."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            self._supervise()
            try:
                self.cluster.wait_ready(nodes, timeout_s=min(10.0, deadline - time.monotonic()))
                return
            except Exception as exc:  # noqa: BLE001 - retried until the bound, then reported
                last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                time.sleep(0.5)
        self.report.fault_errors.append(f"{self._elapsed()}: not ready: {last}")

    def _supervise(self) -> None:
        """A worker that died without the soak killing it is reported, and restarted
        once no fault is in effect (a worker may be unable to start meanwhile)."""
        for name, worker in self.cluster.workers.items():
            if worker.proc is None or worker.alive():
                continue
            if name not in self.dead:
                self.dead.add(name)
                line = f"{self._elapsed()}: {name} exited ({worker.proc.returncode}): "
                line += _last_words(worker.tail(20000))
                self.report.worker_exits.append(line)
                self.log(f"worker exit: {line}")
            if not any(f.active() for f in self.faults):
                worker.start()
                self.dead.discard(name)

    def _recover_cluster(self) -> None:
        """After the last cycle: every fault over, every worker running and answering."""
        self._wait_faults_over()
        for fault in self.faults:
            self.report.fault_errors.extend(fault.errors)
        self._supervise()
        if self.faults or self.report.worker_exits:
            nodes = {  # Celery workers answer pings; beat has no node name
                w.argv[w.argv.index("-n") + 1]
                for w in self.cluster.workers.values()
                if "-n" in w.argv
            }
            self._wait_ready(nodes)

    # -- the end: settle, resolve, report, clean up, audit --------------------------------

    def _finish(self) -> None:
        api, report = self.api, self.report
        known = set(self.every)
        for server in api.list_instances():
            if server["name"].startswith("soak-") and server["uuid"] not in known:
                report.unknown_servers.append(server["uuid"])
                self.every.append(server["uuid"])
        stuck = self._settle("after the run", self.every, also={"VERIFY_RESIZE"})
        self.resizing -= stuck
        deadline = time.monotonic() + self.settle_timeout_s
        while self.resizing and time.monotonic() < deadline:  # confirm or revert the rest
            self._resolve_one(force=True)
        stuck |= self._settle("after confirm/revert", [u for u in self.every if u not in stuck])
        views = [api.show(u) for u in self.every]
        report.statuses = Counter(v["status"] for v in views)
        report.faults = Counter(
            v["fault"]["message"][:70] for v in views if v["status"] == "ERROR" and v["fault"]
        )
        report.audit_live = api.audit()
        report.usage_mismatches_live = usage_mismatches(api)
        report.lost.extend(self._lost(report.requests))
        cleanup_from = len(report.requests)
        for uuid in self.every:  # clean up what is left, then the accounting must still be exact
            if api.show(uuid)["status"] != "DELETED":
                self._request("delete (cleanup)", uuid, api.delete, uuid, cycle=self.cycle)
        self._settle("after deleting all", self.every)
        report.lost.extend(self._lost(report.requests[cleanup_from:]))
        report.audit = api.audit()
        report.usage_mismatches = usage_mismatches(api)

    def _settle(self, phase: str, uuids: list[str], also: set[str] | None = None) -> set[str]:
        """Wait until every server settles, at most ``settle_timeout_s``; report the rest."""
        started = time.monotonic()
        deadline = started + self.settle_timeout_s
        pending = list(uuids)
        self.log(f"settling {phase}: {len(pending)} servers, at most {self.settle_timeout_s:g} s")
        next_reap = started + REAP_AFTER_S
        while pending and time.monotonic() < deadline:
            pending = [u for u in pending if not _settled(self.api.show(u), also or set())]
            if pending and time.monotonic() >= next_reap:
                self.log(f"reaper pass ({len(pending)} servers pending): {_reap()}")
                next_reap = time.monotonic() + REAP_EVERY_S
            if pending:
                time.sleep(0.5)
        pending = [u for u in pending if not _settled(self.api.show(u), also or set())]
        self.report.settle_seconds += time.monotonic() - started
        for uuid in pending:
            details = describe_server(
                self.api.show(uuid),
                self.api.list_actions(uuid),
                self.api.list_migrations(instance_uuid=uuid),
            )
            details["phase"] = phase
            self.report.stuck.append(stuck_line(phase, details))
            self.report.stuck_details.append(details)
        return set(pending)

    def _lost(self, requests: list[Request]) -> list[str]:
        """The requests that never finished (``soak_findings.unfinished``); also notes
        the events left open on the servers they touched."""
        seen: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        lost = []
        for request in requests:
            if request.uuid not in seen:
                actions = self.api.list_actions(request.uuid)
                seen[request.uuid] = (self.api.show(request.uuid), actions)
                self.report.open_events.update(open_events(actions))
            why = unfinished(request, *seen[request.uuid])
            if why is not None:
                context = fault_context(request.at_s, self.report.windows)
                self.report.lost_kinds[request.kind] += 1
                self.report.lost_by_fault[context] += 1
                lost.append(
                    f"{request.kind} of {request.uuid} (cycle {request.cycle}, "
                    f"t={request.at_s:.1f}s, {context}): {why}"
                )
        return lost


def _last_words(log: str) -> str:
    """The line of a worker's log that says why it died: its last CRITICAL line (Celery's
    "Unrecoverable error"), else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    critical = [line for line in lines if "CRITICAL" in line or "Unrecoverable" in line]
    return (critical or lines or ["(empty log)"])[-1][:300]


def _bound(fault: Fault) -> float:
    return fault.duration_s + FAULT_GRACE_S


#: A deployment's beat runs the reaper of operations in flight (``compute.in_flight``): a
#: step message lost in transit (a SIGKILL after the broker handed it to the worker and
#: before the worker recorded it unacked) is sent again once counted lost. This soak runs
#: no beat, so while servers are still pending it runs the reaper's pass itself, at the
#: long soak's pace (``bench/leak_soak.py``: a message counted lost after 15 s).
REAP_AFTER_S, REAP_EVERY_S, LOST_AFTER_S = 20.0, 5.0, 15


def _reap() -> dict[str, Any]:
    from compute.periodic import PeriodicContext
    from compute.periodic.reaper import reap_operations_in_flight
    from compute.sessions import sessions_for
    from novaq.settings import get_settings

    settings = get_settings().model_copy(update={"operation_lost_after": LOST_AFTER_S})
    ctx = PeriodicContext(sessions_for(settings.sqlalchemy_url), settings, "it-client", None)  # type: ignore[arg-type]
    return reap_operations_in_flight(ctx)


def _settled(view: dict[str, Any], also: set[str]) -> bool:
    return view["status"] in SETTLED | also and view["task_state"] is None
