"""The public API for cells: host discovery (Nova's ``nova-manage cell_v2
discover_hosts``). novaq has one cell, ``cell1``; see ``scheduler/discover_hosts.py`` for
what mapping a host means here (bookkeeping: scheduling does not depend on it)."""

from __future__ import annotations

from scheduler import discover_hosts as discovery
from workflows.api import common
from workflows.api.validation import validated


@validated()
def discover_hosts() -> list[str]:
    """Map every compute host not yet mapped to ``cell1``; the hosts mapped by this call
    (empty when there was nothing new)."""
    return discovery.discover_hosts(common.sessions())


__all__ = ["discover_hosts"]
