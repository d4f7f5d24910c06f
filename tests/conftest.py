"""The tiers configure novaq's environment differently at import time (in-memory
broker and SQLite vs real Redis and PostgreSQL), so each runs in its own pytest session,
as ``scripts/test`` does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tcp_proxy import TcpProxy


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    names = {"unit", "integration", "hypervisor", "multihost"}
    tiers = {part for item in items for part in item.path.parts if part in names}
    if len(tiers) > 1:
        raise pytest.UsageError(
            "run tests/unit, tests/integration, tests/hypervisor and tests/multihost in separate "
            "pytest sessions (see scripts/test)"
        )


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    """A TCP proxy in front of the local PostgreSQL (127.0.0.1:5432), to cut and restore;
    the engines that went through it are disposed of after."""
    from models.db import dispose_all  # (imported late: each tier sets novaq's environment first)

    with TcpProxy(5432) as running:
        yield running
    dispose_all()
