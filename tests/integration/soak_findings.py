"""What the soak reports about a server that did not settle, a request that never
finished, and a host whose usage is not its live servers' flavors.

All but ``usage_mismatches`` are pure functions of the public API's dicts (``show``,
``list_actions``, ``list_migrations``), so they can be checked without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Where a server has no operation in flight (with no task_state); VERIFY_RESIZE waits
#: for the soak's confirm or revert.
SETTLED_STATUSES = frozenset({"ACTIVE", "ERROR", "DELETED", "SHUTOFF", "VERIFY_RESIZE"})


#: A request sent this long before a fault began is taken as in flight when it hit.
IN_FLIGHT_S = 5.0


@dataclass(frozen=True, slots=True)
class Request:
    """One operation the soak asked for and the API accepted."""

    kind: str
    uuid: str
    #: The action's request id (None for a boot: found later by its ``create`` action).
    request_id: str | None
    cycle: int
    #: When it was sent, in seconds from the start of the run.
    at_s: float = 0.0


@dataclass(slots=True)
class FaultWindow:
    """When a fault was in effect, in seconds from the start of the run (``end_s`` None:
    it never ended)."""

    kind: str
    start_s: float
    end_s: float | None = None


def fault_context(at_s: float, windows: list[FaultWindow]) -> str:
    """Which fault a request met: "during X" if sent while X was in effect, "just before
    X" if X began within ``IN_FLIGHT_S`` after it (the soak's bursts: still in flight
    when X hit), "after X" if X was the last fault before it, else "before any fault"."""
    before = [w for w in windows if w.start_s <= at_s]
    last = max(before, key=lambda w: w.start_s) if before else None
    if last is not None and (last.end_s is None or at_s <= last.end_s):
        return f"during {last.kind}"
    soon = [w for w in windows if at_s < w.start_s <= at_s + IN_FLIGHT_S]
    if soon:
        return f"just before {min(soon, key=lambda w: w.start_s).kind}"
    return "before any fault" if last is None else f"after {last.kind}"


def describe_server(
    view: dict[str, Any], actions: list[dict[str, Any]], migrations: list[dict[str, Any]]
) -> dict[str, Any]:
    """A stuck server in one flat dict: its states, host, last action and event, and its
    latest migration if it has one."""
    last = actions[-1] if actions else None
    event = last["events"][-1] if last and last["events"] else None
    migration = migrations[-1] if migrations else None  # oldest first
    return {
        "uuid": view["uuid"],
        "status": view["status"],
        "vm_state": view["vm_state"],
        "task_state": view["task_state"],
        "host": view["host"],
        "last_action": None if last is None else _action_line(last),
        "last_event": None if event is None else _event_line(event),
        "migration": None if migration is None else _migration_line(migration),
        "fault": (view.get("fault") or {}).get("message"),
    }


def _action_line(action: dict[str, Any]) -> str:
    state = "finished" if action["finish_time"] else "open"
    return f"{action['action']} {action['request_id']} ({state}, started {action['start_time']})"


def _event_line(event: dict[str, Any]) -> str:
    result = event["result"] or "no result"
    return f"{event['event']} on {event['host']}: {result}"


def _migration_line(migration: dict[str, Any]) -> str:
    return (
        f"{migration['migration_type']} {migration['uuid']} {migration['status']} "
        f"{migration['source_compute']} -> {migration['dest_compute']}"
    )


def stuck_line(phase: str, details: dict[str, Any]) -> str:
    parts = [
        f"[{phase}] {details['uuid']} {details['status']} "
        f"vm_state={details['vm_state']} task_state={details['task_state']} "
        f"host={details['host']}",
        f"last action: {details['last_action']}",
        f"last event: {details['last_event']}",
    ]
    if details["migration"]:
        parts.append(f"migration: {details['migration']}")
    if details["fault"]:
        parts.append(f"fault: {details['fault'][:100]}")
    return "; ".join(parts)


def unfinished(request: Request, view: dict[str, Any], actions: list[dict[str, Any]]) -> str | None:
    """Why ``request`` counts as lost, or None when it finished.

    Instance actions of moves and power operations never get a finish time (as in Nova),
    so the test is on the server and the events: the server has settled (no task_state)
    and the request's action, or a later one on the same server (a delete supersedes
    whatever is in flight, as in Nova), has a step that ended, in success or error. Lost:
    no action was recorded, the server never settled, or no step of it ever ended (the
    message vanished and something put the server back without a word).
    """
    index = _action_index(request, actions)
    if index is None:
        return "no instance action was recorded"
    action = actions[index]
    if view["task_state"] is not None or view["status"] not in SETTLED_STATUSES:
        return (
            f"{action['action']} {action['request_id']}: the server never settled "
            f"({view['status']}/{view['task_state']})"
        )
    later = actions[index:]
    if any(a["finish_time"] or any(e["result"] for e in a["events"]) for a in later):
        return None
    event = action["events"][-1] if action["events"] else None
    where = f"its step {_event_line(event)} never ended" if event else "no step of it ever ran"
    return f"{action['action']} {action['request_id']}: {where}"


def open_events(actions: list[dict[str, Any]]) -> list[str]:
    """Events that never ended (a worker killed inside the step, and whatever finished
    the operation afterwards did not close them): a gap in the record, not a loss."""
    return [
        f"{a['action']} {a['request_id']}: {e['event']} on {e['host']}"
        for a in actions
        for e in a["events"]
        if not e["result"]
    ]


def _action_index(request: Request, actions: list[dict[str, Any]]) -> int | None:
    for index, action in enumerate(actions):
        if request.request_id is None and action["action"] == "create":
            return index
        if request.request_id is not None and action["request_id"] == request.request_id:
            return index
    return None


def usage_mismatches(api: Any) -> list[str]:
    """Each node's usage must equal reserved + the flavors of the live servers on it
    (soft-deleted ones included: they hold their resources until reclaimed, as in Nova,
    and the default list leaves them out)."""
    by_host: dict[str, list[int]] = {}
    for server in [*api.list_instances(), *api.list_instances(status="SOFT_DELETED")]:
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
