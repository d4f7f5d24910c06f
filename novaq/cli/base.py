"""The ``novaq`` command group and what its commands share: error handling, rendering,
finding a local cluster.

Each command parses its arguments, calls one function of ``workflows.api`` (or the cluster
launcher) and renders the result; a ``novaq`` error becomes one red line and exit code 1.
A verb on several servers (``on_each``) goes on past a server that fails, reports each,
and exits 1 at the end if any failed, as the nova client does.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from novaq.exceptions import NovaqError

F = TypeVar("F", bound=Callable[..., Any])

#: The width of output that is piped: wider than any row, so rich never cuts a cell.
UNBOUNDED = 1_000_000


class _Console(Console):
    """A console that fits a terminal but cuts nothing when piped or redirected: rich
    otherwise takes the width of whichever standard stream is a terminal (or 80) and
    shortens uuids and host names with "…", which ``grep`` and ``awk`` then miss. A
    width set explicitly (``console.width = ...``) still wins."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if "width" not in kwargs:
            # rich fixes the width from $COLUMNS when the console is made (at import): that
            # is the terminal's business, read again on each print when there is one.
            self._width = None

    @property
    def size(self) -> ConsoleDimensions:
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(UNBOUNDED, Console.size.fget(self).height)  # type: ignore[attr-defined]
        return Console.size.fget(self)  # type: ignore[attr-defined, no-any-return]

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = _Console()
err_console = _Console(stderr=True)


def handle_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except NovaqError as exc:
            report_error(exc)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def report_error(exc: NovaqError, about: str = "") -> None:
    """One red line on stderr: the error's class and message (after ``about``), never
    wrapped (a script greps it whole)."""
    err_console.print(
        f"[bold red]ERROR ({type(exc).__name__}):[/] {escape(about + str(exc))}", soft_wrap=True
    )


def on_each(
    verb: str,
    servers: Sequence[str],
    call: Callable[[str], str],
    status: str | None = None,
    wait_s: float | None = None,
) -> None:
    """Ask ``call(server)`` (returning the request id) for every server in turn; with
    ``wait_s``, then wait for each accepted one to reach ``status``. A failure is
    reported and the next server tried; exits 1 at the end if any failed."""
    accepted: list[str] = []
    failed = 0
    for server in servers:
        try:
            # The uuid first: a name no longer finds a server that is deleted.
            uuid = str(api().show(server)["uuid"]) if wait_s is not None else server
            request_id = call(server)
        except NovaqError as exc:
            report_error(exc, f"{verb} {server}: ")
            failed += 1
            continue
        click.echo(f"Request to {verb} server {server} has been accepted ({request_id}).")
        accepted.append(uuid)
    if wait_s is not None and status is not None:
        for uuid in accepted:
            try:
                api().wait(uuid, status, timeout=wait_s)
            except NovaqError as exc:
                report_error(exc, f"{verb} {uuid}: ")
                failed += 1
    if failed:
        err_console.print(
            f"[bold red]ERROR:[/] {failed} of {len(servers)} requests to {verb} failed.",
            soft_wrap=True,
        )
        sys.exit(1)


@functools.cache
def api() -> Any:
    # Imported late: the API binds to the settings of the environment at first use, which
    # find the local cluster as any user of the API does (novaq.settings.get_settings).
    from workflows import api as public_api

    return public_api


def render(
    rows: Sequence[dict[str, Any]] | dict[str, Any],
    columns: Iterable[str],
    as_json: bool,
    title: str | None = None,
) -> None:
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    if isinstance(rows, dict):
        table = Table("Property", "Value", title=_text(title))
        for key in columns:
            table.add_row(Text(key), _cell(rows.get(key)))
    else:
        cols = list(columns)
        table = Table(*(escape(c) for c in cols), title=_text(title))
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in cols))
    console.print(table)


def _text(value: str | None) -> Text | None:
    return None if value is None else Text(value)


def _cell(value: Any) -> Text:
    """A value as literal text: a server named ``[/bold]`` or ``[link=...]`` is printed as
    named, never read as rich markup (which would crash or make a hyperlink)."""
    if value is None:
        return Text("-")
    if isinstance(value, dict | list):
        return Text(json.dumps(value, default=str))
    return Text(str(value))


def parse_pairs(items: Iterable[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a mapping (a value may hold ``=``); anything else is a
    usage error naming ``option``."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=option)
        pairs[key] = value
    return pairs


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
@click.version_option(package_name="novaq", prog_name="novaq")
def main() -> None:
    """novaq: the compute side of a Nova-style cloud, on Celery."""
