"""Engine and session handling: one engine per URL per process, short transactions.

``session_scope()`` is the unit of work: commit on success, roll back on error. Worker
processes created by fork call :func:`dispose_after_fork` so no connection crosses a fork
(SQLAlchemy's recommended ``engine.dispose(close=False)``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from novaq.exceptions import ServiceUnavailable

_ENGINES: dict[str, Engine] = {}
_LOCK = threading.Lock()


def _normalise_url(url: str) -> str:
    # Plain postgresql:// and mysql:// URLs pick the drivers novaq installs.
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("mysql://") or url.startswith("mariadb://"):
        return "mysql+pymysql://" + url.split("://", 1)[1]
    return url


def _make_private(database: str | None) -> None:
    """Strip the group and other bits from a SQLite database file and its -wal/-shm.

    The database holds every record novaq keeps; only its owner reads it. SQLite creates
    the -wal and -shm files with the database file's mode, so a private database keeps
    them private; existing ones are tightened too.
    """
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    for path in (database, f"{database}-wal", f"{database}-shm"):
        # NOTE: a file owned by someone else (a shared database) is theirs to protect.
        with contextlib.suppress(FileNotFoundError, PermissionError):
            mode = os.stat(path).st_mode & 0o7777
            if mode & 0o077:
                os.chmod(path, mode & ~0o077)


def _configure_sqlite(engine: Engine) -> None:
    database = engine.url.database

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        _make_private(database)  # before WAL mode, so -wal/-shm inherit 0600
        # Let pysqlite leave transaction control to us, so BEGIN IMMEDIATE below works.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        # NOTE: IMMEDIATE takes the write lock at BEGIN. A deferred transaction that reads
        # then writes can fail with SQLITE_BUSY_SNAPSHOT under concurrent writers, which
        # busy_timeout cannot wait out; IMMEDIATE makes writers queue instead.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def get_engine(url: str) -> Engine:
    """The process-wide engine for ``url`` (created on first use)."""
    url = _normalise_url(url)
    with _LOCK:
        engine = _ENGINES.get(url)
        if engine is None:
            if url.startswith("sqlite"):
                engine = create_engine(url, connect_args={"timeout": 30})
                _configure_sqlite(engine)
            else:
                engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)
            _ENGINES[url] = engine
        return engine


def get_sessionmaker(url: str) -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(url), expire_on_commit=False)


@contextlib.contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A transaction: commit when the block succeeds, roll back when it raises."""
    session = get_sessionmaker(url)()
    try:
        yield session
        session.commit()
    except OperationalError as exc:
        session.rollback()
        if _is_connection_error(exc):
            raise ServiceUnavailable(service="database", reason=str(exc.orig)) from exc
        raise
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _is_connection_error(exc: OperationalError) -> bool:
    text = str(exc.orig).lower()
    return any(
        s in text
        for s in ("connection refused", "could not connect", "can't connect", "unable to open")
    )


def dispose_after_fork() -> None:
    """Drop pooled connections inherited from the parent without closing them under it."""
    for engine in _ENGINES.values():
        engine.dispose(close=False)


def dispose_all() -> None:
    with _LOCK:
        for engine in _ENGINES.values():
            engine.dispose()
        _ENGINES.clear()
