"""``novaq timeline SERVER``: every step of every operation a server went through, across
the scheduler and every host, as a tree (``--json``: the API's dict as is).

Names, ids and messages are printed as literal text (a server named ``[bold]`` is not
rich markup), and in full: a task id or a uuid cut short cannot be searched in Flower.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.text import Text
from rich.tree import Tree

from novaq.cli.base import api, console, handle_errors, json_option, main

#: How each outcome is marked (an unfinished step: running, or its worker died).
MARKS = {
    "success": ("ok", "green"),
    "failure": ("FAILED", "red"),
    "retried": ("retried", "yellow"),
    "revoked": ("revoked", "magenta"),
    "unfinished": ("unfinished", "yellow"),
}


@main.command("timeline")
@click.argument("server")
@json_option
@handle_errors
def timeline(server: str, as_json: bool) -> None:
    """Show SERVER's whole workflow (a name, or a uuid; a deleted server by its uuid):
    each operation, each step with its queue, worker, task id, times, outcome,
    deliveries and state transitions, the host events, faults and resource heals."""
    data = api().timeline(server)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    console.print(render_tree(data))


def render_tree(data: dict[str, Any]) -> Tree:
    server = data["server"]
    title = Text.assemble(
        ("Server ", "bold"),
        (str(server["name"]), "bold"),
        f" {server['uuid']}  ",
        _states(server["vm_state"], server["task_state"], server["power_state"]),
        f"  host {server['host'] or '-'}",
        " (deleted)" if server["deleted"] else "",
    )
    tree = Tree(title)
    if not data["operations"]:
        tree.add(Text("no operation recorded", style="dim"))
    for op in data["operations"]:
        _operation(tree.add(_operation_label(op)), op)
    return tree


def _operation_label(op: dict[str, Any]) -> Text:
    style = {"Error": "red", "running": "yellow"}.get(str(op["result"]), "green")
    return Text.assemble(
        (str(op["action"]), "bold cyan"),
        f"  {op['request_id']}  {_stamp(op['started_at'])} -> {_time(op['finished_at'])}  ",
        (str(op["result"] or "-"), style),
    )


def _operation(branch: Tree, op: dict[str, Any]) -> None:
    """The operation's steps, host events, faults and heals, interleaved in time order."""
    entries: list[tuple[str, int, Any]] = []
    entries += [(s["started_at"] or "", 0, s) for s in op["steps"]]
    entries += [(e["started_at"] or "", 1, e) for e in op["events"]]
    entries += [(f["created_at"] or "", 2, f) for f in op["faults"]]
    entries += [(h["created_at"] or "", 3, h) for h in op["heals"]]
    for _, kind, item in sorted(entries, key=lambda entry: entry[:2]):
        if kind == 0:
            _step(branch.add(_step_label(item)), item)
        else:
            branch.add((_event_label, _fault_label, _heal_label)[kind - 1](item))


def _event_label(event: dict[str, Any]) -> Text:
    return Text.assemble(
        ("event ", "dim"),
        f"{event['event']} on {event['host'] or '-'}  ",
        f"{_time(event['started_at'])} -> {_time(event['finished_at'])}  ",
        (str(event["result"] or "open"), "red" if event["result"] == "Error" else ""),
    )


def _fault_label(fault: dict[str, Any]) -> Text:
    return Text.assemble(
        ("fault ", "bold red"),
        f"{fault['code']} {fault['message']} (host {fault['host'] or '-'}, "
        f"{_time(fault['created_at'])})",
    )


def _heal_label(heal: dict[str, Any]) -> Text:
    return Text.assemble(
        ("heal ", "bold yellow"),
        f"{heal['action']} {heal['resources']} of {heal['consumer_uuid']} on "
        f"{heal['host']}: {heal['reason']} ({_time(heal['created_at'])})",
    )


def _step_label(step: dict[str, Any]) -> Text:
    mark, style = MARKS.get(step["outcome"], (step["outcome"], ""))
    duration = f" ({step['duration_s']} s)" if step["duration_s"] is not None else ""
    return Text.assemble(
        (f"[{mark}] ", style),
        (str(step["task"]), "bold"),
        f"  queue {step['queue'] or '-'}  worker {step['worker'] or '-'}",
        f"  {_time(step['started_at'])} -> {_time(step['ended_at'])}{duration}",
    )


def _step(branch: Tree, step: dict[str, Any]) -> None:
    branch.add(Text(f"task id {step['task_id']}  (sent by {step['parent_id'] or '-'})"))
    branch.add(Text(f"transitions: {_transitions(step['transitions'])}"))
    if step["detail"]:
        style = "red" if step["outcome"] == "failure" else ""
        branch.add(Text(f"result: {step['detail']}", style=style))
    if step["deliveries"] > 1:
        redeliveries = branch.add(
            Text(f"delivered {step['deliveries']} times", style="bold yellow")
        )
        for line in step["delivery_log"]:
            redeliveries.add(Text(line))


def _transitions(transitions: dict[str, list[str | None]]) -> str:
    changed = [
        f"{axis} {before or 'None'} -> {after or 'None'}"
        for axis, (before, after) in transitions.items()
        if before != after
    ]
    return ", ".join(changed) if changed else "none"


def _states(vm_state: str | None, task_state: str | None, power_state: str | None) -> str:
    return f"{vm_state}/{task_state or 'None'}/{power_state}"


def _time(value: str | None) -> str:
    """An ISO time as ``HH:MM:SS.mmm`` (the date is the operation's, rarely needed)."""
    if not value:
        return "..."
    clock = value.split("T", 1)[-1]
    return clock[:12]


def _stamp(value: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS.mmm``."""
    return value.replace("T", " ")[:23] if value else "..."
