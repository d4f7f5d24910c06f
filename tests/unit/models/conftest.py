"""Databases of their own for the model tests that run on both SQLite and PostgreSQL.

A module defines ``sqlite_url`` and ``pg_url`` (each filling ``empty_sqlite_url`` /
``empty_pg_url`` with its probe table), or only ``PROBE_TABLE``, the name of a
``probe_table`` of its own that the default ``sqlite_url`` and ``pg_url`` make, and gets
``url``: its tests run on both."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import pg_databases
from models.db import dispose_all
from tests.tcp_proxy import reachable
from tests.unit.models.probe_table import create_probe_table


@pytest.fixture
def empty_sqlite_url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path}/probe.sqlite"
    dispose_all()


@pytest.fixture
def empty_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A new database on the local PostgreSQL, named after the test module and this
    process (xdist workers run side by side), dropped after."""
    if not reachable(5432):
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    name = f"{request.module.__name__.rsplit('.', 1)[-1]}_{os.getpid()}"
    url = pg_databases.pg_url(name).replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield url
    finally:
        dispose_all()
        pg_databases.drop_pg(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def sqlite_url(empty_sqlite_url: str, request: pytest.FixtureRequest) -> str:
    return create_probe_table(empty_sqlite_url, request.module.PROBE_TABLE)


@pytest.fixture
def pg_url(empty_pg_url: str, request: pytest.FixtureRequest) -> str:
    return create_probe_table(empty_pg_url, request.module.PROBE_TABLE)
