"""Reading a guest's console log: Nova's ``get_console_output`` limits.

The hypervisor side reads at most the last ``MAX_CONSOLE_BYTES`` (100 KiB, Nova's
``MAX_CONSOLE_BYTES``) of the log file; the caller may then keep only the last ``length``
lines (Nova's ``_tail_log``; 0 lines is ""). Bytes the guest wrote that are not UTF-8 are
replaced, never an error. Refuses to know where the log lives (the driver does).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from novaq.exceptions import InvalidInput

MAX_CONSOLE_BYTES: Final = 100 * 1024


def check_length(length: int | None) -> int | None:
    """``length`` (lines) as given, or ``InvalidInput`` for a negative or non-integer one."""
    if length is None:
        return None
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise InvalidInput(reason=f"length must be an integer >= 0, not {length!r}")
    return length


def read_tail(path: Path, max_bytes: int = MAX_CONSOLE_BYTES) -> str:
    """The last ``max_bytes`` of ``path`` as text; "" when the file does not exist (yet)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except FileNotFoundError:
        return ""
    return data.decode("utf-8", errors="replace")


def tail_lines(text: str, length: int | None) -> str:
    """The last ``length`` lines of ``text`` (all of it for None)."""
    if length is None:
        return text
    if length == 0:
        return ""
    return "\n".join(text.split("\n")[-length:])
