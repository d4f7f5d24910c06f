"""The ``novaq`` command group and what its commands share: error handling, rendering,
finding a local cluster.

Each command parses its arguments, calls one function of ``workflows.api`` (or the cluster
launcher) and renders the result; a ``novaq`` error becomes one red line and exit code 1.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from novaq.exceptions import NovaqError

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
err_console = Console(stderr=True)


def handle_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except NovaqError as exc:
            err_console.print(f"[bold red]ERROR ({type(exc).__name__}):[/] {escape(str(exc))}")
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


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


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def main() -> None:
    """novaq: the compute side of a Nova-style cloud, on Celery."""
