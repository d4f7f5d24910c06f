"""Unit tier: SQLite, libvirt's test:/// driver, an in-memory broker. No servers needed.

The environment is fixed here, before any novaq module reads its settings, so the API,
the Celery app and the domain code all agree on one throwaway state directory.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_STATE = Path(tempfile.mkdtemp(prefix="novaq-unit-"))
atexit.register(shutil.rmtree, _STATE, ignore_errors=True)  # (a run leaves no state dir)
# NOTE: the developer's own NOVAQ_* settings must not leak into the tests; the golden-file
# switch is the one test option kept.
for _name in [n for n in os.environ if n.startswith("NOVAQ_") and n != "NOVAQ_REGENERATE_GOLDEN"]:
    del os.environ[_name]
os.environ.update(
    NOVAQ_STATE_DIR=str(_STATE),
    NOVAQ_DATABASE_URL=f"sqlite:///{_STATE}/unit.sqlite",
    NOVAQ_BROKER_URL="memory://",
    NOVAQ_RESULT_BACKEND="cache+memory://",
    NOVAQ_HOST="host1",
    # The in-thread test workers would otherwise queue their run-at-start periodic tasks
    # (power-state sync…) into every workflow test; the periodic tests call them directly.
    NOVAQ_PERIODIC_ENABLE="false",
    # Likewise the in-thread workers' lifecycle-event syncs would race the tests that
    # change guests behind compute's back; tests/unit/compute/test_lifecycle_events.py
    # turns them on where they are the subject.
    NOVAQ_WORKAROUNDS__HANDLE_VIRT_LIFECYCLE_EVENTS="false",
)

from tests.factories import register_cirros, reset_database  # noqa: E402
from tests.unit.task_costs import TaskCosts, counting_task_costs  # noqa: E402


@pytest.fixture(scope="session")
def state_dir() -> Path:
    return _STATE


@pytest.fixture(scope="session")
def migrated_url() -> str:
    from models.migrate import upgrade

    url = os.environ["NOVAQ_DATABASE_URL"]
    upgrade(url)
    return url


@pytest.fixture
def migrated_sqlite_url(tmp_path: Path) -> Iterator[str]:
    """A SQLite database file of the test's own, migrated (``migrated_pg_url``'s twin)."""
    from models.db import dispose_all
    from models.migrate import upgrade

    url = f"sqlite:///{tmp_path}/migrated.sqlite"
    upgrade(url)
    yield url
    dispose_all()


@pytest.fixture
def migrated_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A new database on the local PostgreSQL, migrated, named after the test module and
    this process (xdist workers run side by side), dropped after. Skips the test when no
    PostgreSQL listens on 127.0.0.1:5432."""
    from bench.pg_databases import drop_pg, pg_url
    from models.db import dispose_all
    from models.migrate import upgrade
    from tests.tcp_proxy import reachable

    if not reachable(5432):
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    name = f"{request.module.__name__.rsplit('.', 1)[-1]}_{os.getpid()}"
    url = pg_url(name).replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        upgrade(url)
        yield url
    finally:
        dispose_all()
        drop_pg(name)


@pytest.fixture
def db_url(migrated_url: str) -> Iterator[str]:
    """The unit database with the "cirros" image registered (data in the default image
    store, ``<state_dir>/images``), emptied after each test."""
    register_cirros(migrated_url, _STATE / "images")
    yield migrated_url
    reset_database(migrated_url)


@pytest.fixture(autouse=True)
def _root_logger_level() -> Iterator[None]:
    """Each test starts with the root logger at Python's default level (WARNING).

    Celery configures logging once per process, when the first in-thread worker starts
    (``celery.contrib.testing.worker.start_worker``: ``app.log.setup``), and leaves the
    root logger at that worker's level (ERROR). Every later test in the process then lost
    its WARNING records to ``caplog`` (the heartbeat's and beat's outage lines), so those
    tests failed only when an in-thread worker test ran before them in the same process.
    """
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)
    yield
    root.setLevel(level)


@pytest.fixture
def task_costs() -> Iterator[TaskCosts]:
    """COMMITs and statements per task while the test runs (``tests.unit.task_costs``)."""
    with counting_task_costs() as found:
        yield found


@pytest.fixture
def without_novaq_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``NOVAQ_*`` or ``FLOWER_*`` variable in the environment (the launcher's tests,
    whose settings are the test's own)."""
    for name in list(os.environ):
        if name.startswith(("NOVAQ_", "FLOWER_")):
            monkeypatch.delenv(name)
