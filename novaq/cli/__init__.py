"""The ``novaq`` command: the nova client's verbs plus ``up``, ``demo``, ``db``,
``audit`` and the roles ``controller`` and ``compute``. Each command parses its arguments,
calls one function of ``workflows.api`` (or a launcher) and renders the result; a
``novaq`` error becomes one red line and exit code 1. The commands live by subject in
``novaq/cli/*.py``."""

from __future__ import annotations

from novaq.cli import (  # noqa: F401  (they register their commands)
    admin,
    cells,
    cluster,
    consoles,
    flavors,
    hosts,
    image_endpoint,
    images,
    lifecycle,
    moves,
    rebuild,
    roles,
    server_update,
    servers,
    timeline,
    waiting,
)
from novaq.cli.base import main

__all__ = ["main"]
