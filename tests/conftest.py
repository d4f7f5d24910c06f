"""The tiers configure novaq's environment differently at import time (in-memory
broker and SQLite vs real Redis and PostgreSQL), so each runs in its own pytest session,
as ``scripts/test`` does."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    names = {"unit", "integration", "hypervisor"}
    tiers = {part for item in items for part in item.path.parts if part in names}
    if len(tiers) > 1:
        raise pytest.UsageError(
            "run tests/unit, tests/integration and tests/hypervisor in separate pytest sessions "
            "(see scripts/test)"
        )
