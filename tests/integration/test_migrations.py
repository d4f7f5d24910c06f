"""``novaq db upgrade`` on the real servers: PostgreSQL and MariaDB."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "services",
    "compute_nodes",
    "flavors",
    "flavor_extra_specs",
    "instances",
    "allocations",
    "instance_actions",
    "instance_actions_events",
    "instance_faults",
}


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    ("port", "admin", "url"),
    [
        (
            5432,
            "postgresql+psycopg://postgres@127.0.0.1:5432/test",
            "postgresql://postgres@127.0.0.1:5432/{db}",
        ),
        (3306, "mysql+pymysql://root@127.0.0.1:3306/test", "mysql://root@127.0.0.1:3306/{db}"),
    ],
    ids=["postgresql", "mariadb"],
)
def test_db_upgrade_creates_the_schema(port: int, admin: str, url: str) -> None:
    if not _reachable(port):
        if os.environ.get("CI") == "true" and port == 5432:
            pytest.fail("PostgreSQL is not running")
        pytest.skip(f"nothing listens on {port}")
    db = f"novaq_mig_{os.getpid()}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {db}"))
        conn.execute(text(f"CREATE DATABASE {db}"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
        env.update(PYTHONPATH=str(ROOT), NOVAQ_STATE_DIR=str(ROOT / ".novaq-test"))
        done = subprocess.run(
            [sys.executable, "-m", "novaq.cli", "db", "upgrade", "--url", url.format(db=db)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "database at revision" in done.stdout
        target = create_engine(admin.rsplit("/", 1)[0] + f"/{db}")
        assert set(inspect(target).get_table_names()) >= TABLES
        target.dispose()
    finally:
        with engine.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {db}"))
        engine.dispose()
