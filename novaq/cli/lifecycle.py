"""``novaq`` commands for the life of a server (stop, start, reboot, pause, …).

Each takes one or more servers (uuids or names), asks the API for each in turn and
prints the accepted request, as the nova client does; ``--wait N`` then waits up to N
seconds for every server to reach the operation's target status. A server that fails is
reported and the others still asked; the exit code is 1 if any failed
(``novaq.cli.base.on_each``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from novaq.cli.base import api, handle_errors, main, on_each

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

servers_argument = click.argument("servers", nargs=-1, required=True)


def wait_option(status: str) -> Callable[[Any], Any]:
    return click.option(
        "--wait", "wait_s", type=float, default=None, help=f"Wait up to N s for {status}."
    )


def _register(verb: str, call_name: str, status: str | None) -> None:
    title = verb.replace("-", " ").capitalize()
    if status is None:

        @main.command(verb, help=f"{title} of servers (no status changes).")
        @servers_argument
        @handle_errors
        def once(servers: tuple[str, ...]) -> None:
            on_each(verb.replace("-", " "), servers, getattr(api(), call_name))

        return

    @main.command(verb, help=f"{verb.capitalize()} servers (then {status}).")
    @servers_argument
    @wait_option(status)
    @handle_errors
    def command(servers: tuple[str, ...], wait_s: float | None) -> None:
        on_each(verb, servers, getattr(api(), call_name), status, wait_s)


for _verb, (_call, _status) in OPERATIONS.items():
    _register(_verb, _call, _status)


@main.command()
@servers_argument
@click.option(
    "--image", "rescue_image_ref", default=None, help="Rescue image (default: the server's own)."
)
@wait_option("RESCUE")
@handle_errors
def rescue(servers: tuple[str, ...], rescue_image_ref: str | None, wait_s: float | None) -> None:
    """Rescue servers: boot a rescue image with the root disk attached second (then RESCUE)."""
    on_each(
        "rescue",
        servers,
        lambda server: api().rescue(server, rescue_image_ref=rescue_image_ref),
        "RESCUE",
        wait_s,
    )


@main.command()
@servers_argument
@click.option("--hard", is_flag=True, help="Power cycle instead of an ACPI reboot.")
@wait_option("ACTIVE")
@handle_errors
def reboot(servers: tuple[str, ...], hard: bool, wait_s: float | None) -> None:
    """Reboot servers (soft unless --hard)."""
    on_each("reboot", servers, lambda server: api().reboot(server, hard=hard), "ACTIVE", wait_s)


def _lock(server: str, action: str, **kwargs: Any) -> str:
    """lock/unlock answer with the server; the request id is that of its latest
    lock/unlock action (an already locked server keeps the one that locked it)."""
    uuid = getattr(api(), action)(server, **kwargs)["uuid"]
    done = [a for a in api().list_actions(uuid) if a["action"] == action]
    return str(done[-1]["request_id"]) if done else "-"


@main.command()
@servers_argument
@click.option("--reason", default=None, help="Why the server is locked (shown to users).")
@handle_errors
def lock(servers: tuple[str, ...], reason: str | None) -> None:
    """Lock servers: every other operation is refused until they are unlocked (``show``
    then says locked, with the reason)."""
    on_each("lock", servers, lambda server: _lock(server, "lock", reason=reason))


@main.command()
@servers_argument
@handle_errors
def unlock(servers: tuple[str, ...]) -> None:
    """Unlock servers."""
    on_each("unlock", servers, lambda server: _lock(server, "unlock"))


@main.command()
@servers_argument
@wait_option("SHELVED_OFFLOADED (SHELVED when shelved_offload_time is not 0)")
@handle_errors
def shelve(servers: tuple[str, ...], wait_s: float | None) -> None:
    """Shelve servers (then SHELVED_OFFLOADED, as shelved_offload_time is 0 by default)."""
    from novaq.settings import get_settings

    offloaded = get_settings().shelved_offload_time == 0
    status = "SHELVED_OFFLOADED" if offloaded else "SHELVED"
    on_each("shelve", servers, api().shelve, status, wait_s)
