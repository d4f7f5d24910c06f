"""The state directory is its owner's alone: every directory 0700, every file 0600."""

from __future__ import annotations

import io
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from novaq.launcher.cluster import Cluster
from novaq.launcher.plan import ProcessSpec, write_cluster_config
from novaq.launcher.private_files import tighten_tree
from novaq.settings import Settings

# The settings of each test are its own: no NOVAQ_* or FLOWER_* of the shell or the tier.
pytestmark = pytest.mark.usefixtures("without_novaq_env")


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual 022: files would be world-readable unless novaq makes them private."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def modes(root: Path) -> dict[str, int]:
    """Every path under ``root`` (itself included) and its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def not_private(root: Path) -> dict[str, str]:
    return {name: oct(mode) for name, mode in modes(root).items() if mode & 0o077}


# What a worker and beat do in the state directory: write the SQLite database through
# models.db (WAL: -wal and -shm files) and open a shelve schedule as celery beat does.
_CHILD = """
import os, shelve, sys
from sqlalchemy import text
from models.db import session_scope
state = sys.argv[1]
with session_scope(f"sqlite:///{state}/child.sqlite") as session:
    session.execute(text("CREATE TABLE t (x INTEGER)"))
    session.execute(text("INSERT INTO t VALUES (1)"))
with shelve.open(os.path.join(state, "celerybeat-schedule")) as schedule:
    schedule["entries"] = {}
os.makedirs(os.path.join(state, "made-by-child"))
open(os.path.join(state, "made-by-child", "file"), "w").write("x")
print("child done", flush=True)
import time; time.sleep(60)
"""


class ChildCluster(Cluster):
    def plan(self, broker_url: str) -> list[ProcessSpec]:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
        argv = [sys.executable, "-c", _CHILD, str(self.state_dir)]
        return [ProcessSpec("child", argv, env)]


def test_novaq_up_leaves_nothing_in_the_state_directory_readable_by_others(
    tmp_path: Path, open_umask: None
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    leftover = state / "logs"
    leftover.mkdir(mode=0o755)
    (leftover / "old.log").write_text("an older run's log")
    os.chmod(leftover / "old.log", 0o644)
    output = io.StringIO()
    cluster = ChildCluster(Settings(state_dir=state), n_hosts=1, output=output)
    with cluster:
        log = cluster.log_path("child")
        deadline = time.monotonic() + 60
        while "child done" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "child done" in log.read_text()
        found = modes(state)
        assert not not_private(state)
        ready = cluster.ready_line()  # what `novaq up` prints once the cluster answers
    for name in (
        "novaq.sqlite",  # the launcher's migration, in its own process
        "child.sqlite",
        "child.sqlite-wal",
        "child.sqlite-shm",
        "cluster.toml",
        "flower-credentials",
        "broker/redis.conf",
        "broker/url",
        "broker/redis.log",
        "logs/child.log",
        "logs/old.log",
        "made-by-child/file",
    ):
        assert found.get(name) == 0o600, (name, found)
    schedule = [name for name in found if name.startswith("celerybeat-schedule")]
    assert schedule and all(found[name] == 0o600 for name in schedule)  # dbm adds suffixes
    for name in (".", "logs", "broker", "made-by-child", "images"):
        assert found.get(name) == 0o700, (name, found)
    # Where the credential is, never what it is.
    password = (state / "flower-credentials").read_text().split(":", 1)[1].strip()
    printed = output.getvalue() + ready
    assert str(state.resolve() / "flower-credentials") in ready
    assert password not in printed
    assert password not in "".join(p.read_text() for p in (state / "logs").glob("*.log"))


def test_models_db_makes_a_new_sqlite_database_and_its_wal_private(
    tmp_path: Path, open_umask: None
) -> None:
    from sqlalchemy import insert, text

    from models import ServiceLiveness
    from models.db import dispose_all, liveness_write, session_scope

    url = f"sqlite:///{tmp_path}/db.sqlite"
    try:
        with session_scope(url) as session:
            session.execute(text("CREATE TABLE t (x INTEGER)"))
        liveness_write(url, insert(ServiceLiveness).values(service_id=1))  # its own file
        assert (tmp_path / "db.sqlite-wal").exists()
        main = ("db.sqlite", "db.sqlite-wal", "db.sqlite-shm")
        for name in (*main, *(n.replace(".sqlite", ".sqlite-liveness") for n in main)):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    finally:
        dispose_all()


def test_the_cluster_config_is_private_even_over_an_older_readable_one(
    tmp_path: Path, open_umask: None
) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    (tmp_path / "state").mkdir(mode=0o755)
    (tmp_path / "state" / "cluster.toml").write_text("")
    path, _ = write_cluster_config(settings, 1)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_beat_makes_its_schedule_private_when_started_by_hand(
    tmp_path: Path, open_umask: None
) -> None:
    import shelve

    from tasks.beat import _make_private

    with shelve.open(str(tmp_path / "celerybeat-schedule")) as schedule:
        schedule["x"] = 1
    _make_private(tmp_path / "celerybeat-schedule")
    files = [p for p in tmp_path.iterdir() if p.name.startswith("celerybeat-schedule")]
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)


def test_tighten_tree_strips_group_and_other_bits_and_leaves_symlinks_alone(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.write_text("not ours")
    os.chmod(outside, 0o644)
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    os.chmod(root / "sub", 0o755)
    (root / "sub" / "f").write_text("x")
    os.chmod(root / "sub" / "f", 0o664)
    (root / "link").symlink_to(outside)
    tighten_tree(root)
    assert stat.S_IMODE((root / "sub").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "sub" / "f").stat().st_mode) == 0o600
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
