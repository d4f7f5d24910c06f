"""The writer gate (``models.writer_gate``): a heartbeat that finds SQLite's write lock
taken closes the gate, and writers that have not begun wait for it, so the heartbeat
waits only for the transactions already begun; both waits are bounded by ``HOLD_S``.
Real SQLite files, real ``flock`` locks, real threads and processes."""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Update, column, event, select, table, text, update

from models import writer_gate
from models.db import dispose_all, get_engine, liveness_write, session_scope
from models.writer_gate import Gate, gate_of

TABLE = "novaq_gate_probe"
probe = table(TABLE, column("n"), column("beats"))
WAIT_S = 10.0  # how long a test waits for what must happen


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path}/gate.sqlite"
    with session_scope(url) as session:
        session.execute(text(f"CREATE TABLE {TABLE} (n int PRIMARY KEY, beats int NOT NULL)"))
        session.execute(text(f"INSERT INTO {TABLE} VALUES (1, 0)"))
    yield url
    dispose_all()


def _beat() -> Update:
    return update(probe).where(probe.c.n == 1).values(beats=probe.c.beats + 1)


def _database(url: str) -> str:
    return url.removeprefix("sqlite:///")


def _is_closed(path: str) -> bool:
    """Whether a heartbeat holds the gate, seen through a description of our own."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_heartbeat_that_waits_for_the_lock_goes_before_writers_that_begin_after_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_gate, "HOLD_S", WAIT_S)
    gate = f"{_database(url)}-gate"
    order: list[str] = []
    seen_by_late_writer: list[int] = []

    def late_writer() -> None:
        with session_scope(url) as session:  # waits at the gate, then BEGIN IMMEDIATE
            seen_by_late_writer.append(int(session.scalars(select(probe.c.beats)).one()))
            session.execute(text(f"UPDATE {TABLE} SET beats = beats + 100"))

    def heartbeat() -> None:
        liveness_write(url, _beat())
        order.append("heartbeat committed")

    def on_statement(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        if statement == "BEGIN IMMEDIATE" and threading.current_thread() is late:
            order.append("late writer began")

    beating = threading.Thread(target=heartbeat)
    late = threading.Thread(target=late_writer)
    event.listen(get_engine(url), "before_cursor_execute", on_statement)
    try:
        with session_scope(url) as first:  # holds the write lock
            first.execute(text(f"UPDATE {TABLE} SET beats = beats + 10"))
            beating.start()
            _until(lambda: _is_closed(gate), "the heartbeat closes the gate")
            late.start()
            time.sleep(0.2)  # the late writer is at the gate
            assert late.is_alive() and beating.is_alive() and not order
        beating.join(WAIT_S)
        late.join(WAIT_S)
    finally:
        event.remove(get_engine(url), "before_cursor_execute", on_statement)
    assert not beating.is_alive() and not late.is_alive()
    # The late writer did not even begin (it was not in SQLite's lock queue, where it could
    # win the race) until the heartbeat had committed: it saw 10 + 1.
    assert order == ["heartbeat committed", "late writer began"]
    assert seen_by_late_writer == [11]
    assert not _is_closed(gate)


def test_a_heartbeat_keeps_the_gate_closed_for_hold_s_at_most(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_gate, "HOLD_S", 0.2)
    gate = f"{_database(url)}-gate"
    heartbeat = threading.Thread(target=liveness_write, args=(url, _beat()))
    with session_scope(url) as first:
        first.execute(text(f"UPDATE {TABLE} SET beats = beats + 10"))
        heartbeat.start()
        _until(lambda: _is_closed(gate), "the heartbeat closes the gate")
        _until(lambda: not _is_closed(gate), "the gate opens after HOLD_S")
        assert heartbeat.is_alive()  # it still waits for the lock, the gate open
    heartbeat.join(WAIT_S)
    with session_scope(url, read_only=True) as session:
        assert session.scalars(select(probe.c.beats)).one() == 11


def _hold_gate_exclusively(path: str, held: mp.Event, stop: mp.Event) -> None:  # type: ignore[valid-type]
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held.set()  # type: ignore[attr-defined]
    stop.wait(WAIT_S)  # type: ignore[attr-defined]  # a heartbeat's process that hangs


def test_a_writer_waits_at_most_hold_s_for_a_gate_that_another_process_keeps_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_gate, "HOLD_S", 0.2)
    gate = Gate(str(tmp_path / "db.sqlite"))
    context = mp.get_context("fork")
    held, stop = context.Event(), context.Event()
    holder = context.Process(target=_hold_gate_exclusively, args=(gate.path, held, stop))
    holder.start()
    try:
        assert held.wait(WAIT_S)
        started = time.monotonic()
        gate.wait_until_open()
        assert time.monotonic() - started >= 0.2  # it saw the gate closed, and waited
    finally:
        stop.set()
        holder.join(WAIT_S)
    started = time.monotonic()
    gate.wait_until_open()  # open: at once
    assert time.monotonic() - started < 0.2


def _open_in_child(gate: Gate) -> None:
    with gate.closed():  # this process's own description: the parent's lock is not touched
        pass


def test_a_forked_process_does_not_open_the_gate_its_parent_keeps_closed(tmp_path: Path) -> None:
    gate = Gate(str(tmp_path / "db.sqlite"))
    with gate.closed():
        assert _is_closed(gate.path)
        child = mp.get_context("fork").Process(target=_open_in_child, args=(gate,))
        child.start()
        child.join(WAIT_S)
        assert child.exitcode == 0
        assert _is_closed(gate.path)  # still the parent's
    assert not _is_closed(gate.path)


def test_a_second_heartbeat_finds_the_gate_closed_and_leaves_it_to_the_first(
    tmp_path: Path,
) -> None:
    first, second = Gate(str(tmp_path / "db.sqlite")), Gate(str(tmp_path / "db.sqlite"))
    with first.closed():
        with second.closed():
            pass
        assert _is_closed(first.path)  # the second one did not open it
    assert not _is_closed(first.path)


def test_an_in_memory_database_has_no_gate() -> None:
    assert gate_of(None) is None
    assert gate_of(":memory:") is None
    assert gate_of("/some/where.sqlite") is gate_of("/some/where.sqlite")


def _die_holding_the_gate_with_a_child_alive(path: str, pid_file: str) -> None:
    gate = gate_of(path.removesuffix("-gate"))
    assert gate is not None
    with gate.closed():
        pid = os.fork()
        if pid == 0:  # the child: lives on, as a pool child outlives a killed worker a while
            time.sleep(60)  # killed by the test
            os._exit(0)
        Path(pid_file).write_text(str(pid))
        os._exit(0)  # killed while it holds the gate: no LOCK_UN


def test_a_process_that_dies_holding_the_gate_leaves_it_open_even_with_children_alive(
    tmp_path: Path,
) -> None:
    path, pid_file = str(tmp_path / "db.sqlite-gate"), str(tmp_path / "orphan.pid")
    parent = mp.get_context("fork").Process(
        target=_die_holding_the_gate_with_a_child_alive, args=(path, pid_file)
    )
    parent.start()
    # NOTE: not join(): the orphan inherited the sentinel that join() waits on.
    _until(lambda: parent.exitcode is not None, "the holder dies")
    orphan = int(Path(pid_file).read_text())
    try:
        os.kill(orphan, 0)  # still alive, with whatever it inherited
        assert not _is_closed(path)
    finally:
        os.kill(orphan, 9)
