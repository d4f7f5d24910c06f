"""The Nova side shared by the differential modules that ask Nova's filters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.differential.nova_process import Nova, nova_process


@pytest.fixture(scope="session")
def nova() -> Iterator[Nova]:
    """One verdict process (``nova_verdicts.py``) for every module asking Nova's filters;
    a module with a script of its own overrides this fixture."""
    with nova_process("nova_verdicts.py") as side:
        yield Nova(side)
