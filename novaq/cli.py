"""The ``novaq`` command: the nova client's verbs plus ``up``, ``demo``, ``db`` and
``audit``. Each command parses its arguments, calls one function of ``workflows.api`` (or
the cluster launcher) and renders the result; a ``novaq`` error becomes one red line and
exit code 1. The commands live by subject in ``novaq/cli_*.py``."""

from __future__ import annotations

from novaq import (  # noqa: F401  (they register their commands)
    cli_admin,
    cli_cells,
    cli_cluster,
    cli_consoles,
    cli_images,
    cli_lifecycle,
    cli_moves,
    cli_servers,
)
from novaq.cli_base import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
