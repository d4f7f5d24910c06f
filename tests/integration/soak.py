"""The leak soak: random boots and deletes on real workers, with spawn failures injected
and a compute worker SIGKILLed and restarted mid-run; then the accounting must be exact.

Used in a short form by ``test_leak_soak.py`` and in a long form by ``bench/leak_soak.py``.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.integration.workers import Cluster

SETTLED = {"ACTIVE", "ERROR", "DELETED", "SHUTOFF"}
FLAVORS = (("soak.small", 1, 512, 1), ("soak.medium", 2, 1024, 2), ("soak.large", 4, 4096, 5))


@dataclass
class SoakReport:
    operations: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    seconds: float = 0.0
    settle_seconds: float = 0.0
    audit_live: dict[str, Any] = field(default_factory=dict)
    usage_mismatches_live: list[str] = field(default_factory=list)
    audit: dict[str, Any] = field(default_factory=dict)
    usage_mismatches: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    stuck_details: list[dict[str, Any]] = field(default_factory=list)


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
) -> SoakReport:
    """``down_s``: how long the victim stays dead. Past ``service_down_time`` the API
    deletes its servers locally meanwhile, and its restart meets their guests."""
    rng = random.Random(seed)
    report = SoakReport()
    ensure_flavors(api)
    kill_at = {int(cycles * (k + 1) / (kills + 1)) for k in range(kills)}
    live: list[str] = []
    every: list[str] = []
    resizing: set[str] = set()
    started = time.monotonic()
    for cycle in range(cycles):
        if cycle in kill_at:
            # A burst first, so the kill lands while steps are in flight on the victim.
            burst = api.boot(f"soak-burst-{cycle}", FLAVORS[0][0], "cirros", count=6)
            live.extend(burst)
            every.extend(burst)
            report.operations["boot"] += len(burst)
            time.sleep(rng.uniform(0.0, 0.08))
            _kill_and_restart(cluster, victim, down_s)
            report.kills += 1
        _resolve_one(api, resizing, rng, report)
        roll = rng.random()
        if live and roll < 0.35:
            uuid = live.pop(rng.randrange(len(live)))
            resizing.discard(uuid)
            api.delete(uuid)
            report.operations["delete"] += 1
        elif live and roll < 0.55:
            _try_resize(api, rng.choice(live), rng, resizing, report)
        else:
            name = rng.choice(FLAVORS)[0]
            uuids = api.boot(f"soak-{cycle}", name, "cirros", count=rng.choice((1, 1, 2)))
            live.extend(uuids)
            every.extend(uuids)
            report.operations["boot"] += len(uuids)
        time.sleep(rng.uniform(0, 0.05))
    report.seconds = time.monotonic() - started
    _settle(api, every, settle_timeout_s, report, also={"VERIFY_RESIZE"})
    while resizing:  # confirm or revert every resize still waiting
        _resolve_one(api, resizing, rng, report, force=True)
    _settle(api, every, settle_timeout_s, report)
    views = [api.show(u) for u in every]
    report.statuses = Counter(v["status"] for v in views)
    report.faults = Counter(v["fault"]["message"][:70] for v in views if v["status"] == "ERROR")
    report.audit_live = api.audit()
    report.usage_mismatches_live = usage_mismatches(api)
    for uuid in every:  # clean up what is left, then the accounting must still be exact
        if api.show(uuid)["status"] != "DELETED":
            api.delete(uuid)
    _settle(api, every, settle_timeout_s, report)
    report.audit = api.audit()
    report.usage_mismatches = usage_mismatches(api)
    return report


def _try_resize(
    api: Any, uuid: str, rng: random.Random, resizing: set[str], report: SoakReport
) -> None:
    view = api.show(uuid)
    if view["status"] != "ACTIVE" or view["task_state"] is not None or uuid in resizing:
        return
    choices = [f[0] for f in FLAVORS if f[0] != view["flavor"]["name"]]
    try:
        if rng.random() < 0.3:
            api.migrate(uuid)
            report.operations["migrate"] += 1
        else:
            api.resize(uuid, rng.choice(choices))
            report.operations["resize"] += 1
    except Exception as exc:  # noqa: BLE001 - a state race with the soak's own steps
        report.operations[f"refused: {type(exc).__name__}"] += 1
        return
    resizing.add(uuid)


def _resolve_one(
    api: Any, resizing: set[str], rng: random.Random, report: SoakReport, force: bool = False
) -> None:
    """Confirm or revert one resize that reached VERIFY_RESIZE; forget ended ones."""
    for uuid in list(resizing):
        view = api.show(uuid)
        if view["status"] in ("ACTIVE", "ERROR", "DELETED") and view["task_state"] is None:
            resizing.discard(uuid)
            continue
        if view["status"] == "VERIFY_RESIZE" and view["task_state"] is None:
            if rng.random() < 0.5:
                api.confirm_resize(uuid)
                report.operations["confirm"] += 1
            else:
                api.revert_resize(uuid)
                report.operations["revert"] += 1
            resizing.discard(uuid)
            return
    if force and resizing:
        time.sleep(0.2)


def _kill_and_restart(cluster: Cluster, victim: str, down_s: float) -> None:
    worker = cluster.workers[victim]
    worker.stop(signal.SIGKILL)
    time.sleep(down_s)
    worker.start()
    cluster.wait_ready({f"compute@{victim}"})


def _settle(
    api: Any, uuids: list[str], timeout_s: float, report: SoakReport, also: set[str] | None = None
) -> None:
    started = time.monotonic()
    deadline = started + timeout_s
    pending = list(uuids)
    while pending and time.monotonic() < deadline:
        pending = [u for u in pending if not _settled(api.show(u), also or set())]
        time.sleep(0.5)
    report.settle_seconds += time.monotonic() - started
    report.stuck = [f"{u}: {api.show(u)['status']}/{api.show(u)['task_state']}" for u in pending]
    for uuid in pending:
        report.stuck_details.append(
            {
                "show": api.show(uuid),
                "actions": api.list_actions(uuid),
                "migrations": api.list_migrations(instance_uuid=uuid),
            }
        )


def _settled(view: dict[str, Any], also: set[str]) -> bool:
    return view["status"] in SETTLED | also and view["task_state"] is None


def usage_mismatches(api: Any) -> list[str]:
    """Each node's usage must equal reserved + the flavors of the live servers on it."""
    by_host: dict[str, list[int]] = {}
    for server in api.list_instances():
        if server["host"]:
            f = server["flavor"]
            sums = by_host.setdefault(server["host"], [0, 0, 0])
            sums[0] += f["vcpus"]
            sums[1] += f["memory_mb"]
            sums[2] += f["root_gb"] + f["ephemeral_gb"]
    problems = []
    for host in api.list_hosts():
        vcpus, memory_mb, disk_gb = by_host.get(host["host"], [0, 0, 0])
        got = (host["vcpus_used"], host["memory_mb_used"] - 512, host["local_gb_used"])
        if got != (vcpus, memory_mb, disk_gb):
            problems.append(
                f"{host['host']}: used {got}, live servers hold {(vcpus, memory_mb, disk_gb)}"
            )
    return problems
