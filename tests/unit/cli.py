"""Running the real ``novaq`` command in-process (click's runner), as the unit tier's CLI
tests do: its output as JSON when it succeeds, its one error line when it refuses."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner, Result

from novaq.cli import main


def novaq(*argv: str) -> Result:
    return CliRunner().invoke(main, list(argv))


def novaq_json(*argv: str) -> Any:
    """``novaq ARGV --json``, which must succeed: what it printed, parsed."""
    result = novaq(*argv, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def refused(*argv: str) -> str:
    """``novaq ARGV``, which must refuse cleanly (one error line, exit 1, no traceback):
    its output as one line, however the console wrapped it."""
    result = novaq(*argv)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "ERROR (" in result.output, result.output
    return " ".join(result.output.split())
