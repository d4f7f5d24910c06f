"""``novaq`` commands for the life of a server (stop, start, reboot, pause, …).

Each takes one or more server uuids, asks the API for each in turn and prints the
accepted request, as the nova client does; ``--wait N`` then waits up to N seconds for
every server to reach the operation's target status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from novaq.cli.base import api, handle_errors, main

#: command -> (API call name, status to wait for; None: the operation changes no status)
OPERATIONS = {
    "stop": ("stop", "SHUTOFF"),
    "start": ("start", "ACTIVE"),
    "pause": ("pause", "PAUSED"),
    "unpause": ("unpause", "ACTIVE"),
    "suspend": ("suspend", "SUSPENDED"),
    "resume": ("resume", "ACTIVE"),
    "unrescue": ("unrescue", "ACTIVE"),
    "trigger-crash-dump": ("trigger_crash_dump", None),
    "shelve-offload": ("shelve_offload", "SHELVED_OFFLOADED"),
    "unshelve": ("unshelve", "ACTIVE"),
    "restore": ("restore", "ACTIVE"),
}

uuids_argument = click.argument("uuids", nargs=-1, required=True)


def wait_option(status: str) -> Callable[[Any], Any]:
    return click.option(
        "--wait", "wait_s", type=float, default=None, help=f"Wait up to N s for {status}."
    )


def _accept(verb: str, uuids: tuple[str, ...], call: Callable[[str], str]) -> None:
    for uuid in uuids:
        request_id = call(uuid)
        click.echo(f"Request to {verb} server {uuid} has been accepted ({request_id}).")


def _wait(uuids: tuple[str, ...], status: str, wait_s: float | None) -> None:
    if wait_s is not None:
        for uuid in uuids:
            api().wait(uuid, status, timeout=wait_s)


def _register(verb: str, call_name: str, status: str | None) -> None:
    title = verb.replace("-", " ").capitalize()
    if status is None:

        @main.command(verb, help=f"{title} of servers (no status changes).")
        @uuids_argument
        @handle_errors
        def once(uuids: tuple[str, ...]) -> None:
            _accept(verb.replace("-", " "), uuids, getattr(api(), call_name))

        return

    @main.command(verb, help=f"{verb.capitalize()} servers (then {status}).")
    @uuids_argument
    @wait_option(status)
    @handle_errors
    def command(uuids: tuple[str, ...], wait_s: float | None) -> None:
        _accept(verb, uuids, getattr(api(), call_name))
        _wait(uuids, status, wait_s)


for _verb, (_call, _status) in OPERATIONS.items():
    _register(_verb, _call, _status)


@main.command()
@uuids_argument
@click.option(
    "--image", "rescue_image_ref", default=None, help="Rescue image (default: the server's own)."
)
@wait_option("RESCUE")
@handle_errors
def rescue(uuids: tuple[str, ...], rescue_image_ref: str | None, wait_s: float | None) -> None:
    """Rescue servers: boot a rescue image with the root disk attached second (then RESCUE)."""
    _accept("rescue", uuids, lambda uuid: api().rescue(uuid, rescue_image_ref=rescue_image_ref))
    _wait(uuids, "RESCUE", wait_s)


@main.command()
@uuids_argument
@click.option("--hard", is_flag=True, help="Power cycle instead of an ACPI reboot.")
@wait_option("ACTIVE")
@handle_errors
def reboot(uuids: tuple[str, ...], hard: bool, wait_s: float | None) -> None:
    """Reboot servers (soft unless --hard)."""
    _accept("reboot", uuids, lambda uuid: api().reboot(uuid, hard=hard))
    _wait(uuids, "ACTIVE", wait_s)


def _lock(uuid: str, action: str, **kwargs: Any) -> str:
    """lock/unlock answer with the server; the request id is that of its latest
    lock/unlock action (an already locked server keeps the one that locked it)."""
    getattr(api(), action)(uuid, **kwargs)
    done = [a for a in api().list_actions(uuid) if a["action"] == action]
    return str(done[-1]["request_id"]) if done else "-"


@main.command()
@uuids_argument
@click.option("--reason", default=None, help="Why the server is locked (shown to users).")
@handle_errors
def lock(uuids: tuple[str, ...], reason: str | None) -> None:
    """Lock servers: every other operation is refused until they are unlocked."""
    _accept("lock", uuids, lambda uuid: _lock(uuid, "lock", reason=reason))


@main.command()
@uuids_argument
@handle_errors
def unlock(uuids: tuple[str, ...]) -> None:
    """Unlock servers."""
    _accept("unlock", uuids, lambda uuid: _lock(uuid, "unlock"))


@main.command()
@uuids_argument
@wait_option("SHELVED_OFFLOADED (SHELVED when shelved_offload_time is not 0)")
@handle_errors
def shelve(uuids: tuple[str, ...], wait_s: float | None) -> None:
    """Shelve servers (then SHELVED_OFFLOADED, as shelved_offload_time is 0 by default)."""
    from novaq.settings import get_settings

    _accept("shelve", uuids, api().shelve)
    offloaded = get_settings().shelved_offload_time == 0
    _wait(uuids, "SHELVED_OFFLOADED" if offloaded else "SHELVED", wait_s)
