"""Engine and session handling: one engine per URL per process, short transactions.

``session_scope()`` is the unit of work: commit on success, roll back on error. Worker
processes created by fork call :func:`dispose_after_fork` so no connection crosses a fork
(SQLAlchemy's recommended ``engine.dispose(close=False)``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Iterator

import sqlalchemy.exc
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, DisconnectionError, PendingRollbackError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from models import outage
from novaq.exceptions import DatabaseUnavailable

LOG = logging.getLogger(__name__)

_ENGINES: dict[str, Engine] = {}
_SESSIONMAKERS: dict[Engine, sessionmaker[Session]] = {}
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
    """The process-wide session factory of ``url``'s engine. One, not one per transaction:
    each ``sessionmaker`` builds a Session subclass with its own event dispatch, which
    cost a transaction about a millisecond of CPU."""
    engine = get_engine(url)
    with _LOCK:
        maker = _SESSIONMAKERS.get(engine)
        if maker is None:
            maker = _SESSIONMAKERS[engine] = sessionmaker(bind=engine, expire_on_commit=False)
        return maker


#: The dialects whose default isolation (read committed) lets each statement of a
#: transaction see what others committed meanwhile; ``snapshot`` asks them for one view.
_SNAPSHOT_DIALECTS = frozenset({"postgresql", "mysql", "mariadb"})


@contextlib.contextmanager
def session_scope(url: str, snapshot: bool = False) -> Iterator[Session]:
    """A transaction: commit when the block succeeds, roll back when it raises.

    ``snapshot``: every statement reads the same committed state (REPEATABLE READ), for a
    reader that compares several tables (the audit): on PostgreSQL's default isolation a
    delete committed between two of its statements would show a server without its
    allocation. SQLite's transaction is one snapshot already.

    An error of the database's availability (``is_transient_error``), wherever it comes
    from (the connect, a statement, the commit), is raised as ``DatabaseUnavailable``; a
    rollback or close that fails on the dead connection does not hide it. Inside an
    outage budget (``models.outage``, a worker's task) the transaction first waits for the
    database: nothing has happened in it yet, so waiting there is always safe.
    """
    session = outage.ride_out(lambda: _open(url, snapshot), "Opening a database transaction")
    try:
        yield session
        session.commit()
    except BaseException as exc:
        _rollback_quietly(session)
        if isinstance(exc, SQLAlchemyError) and is_transient_error(exc):
            raise unavailable(exc) from exc
        raise
    finally:
        _close_quietly(session)


def _open(url: str, snapshot: bool = False) -> Session:
    """A session with its connection checked out (pinged, ``pool_pre_ping``) and its
    transaction begun, so an unreachable database is known before the block runs."""
    session = get_sessionmaker(url)()
    try:
        if snapshot and get_engine(url).dialect.name in _SNAPSHOT_DIALECTS:
            # Set as the transaction begins; the pool resets it when the connection returns.
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        else:
            session.connection()
    except SQLAlchemyError as exc:
        _close_quietly(session)
        if is_transient_error(exc):
            raise unavailable(exc) from exc
        raise
    return session


def _rollback_quietly(session: Session) -> None:
    try:
        session.rollback()
    except SQLAlchemyError as exc:
        # A dead connection cannot roll back; the server dropped the transaction with it.
        if not is_transient_error(exc):
            raise
        LOG.debug("Rollback on a lost database connection: %s", exc)


def _close_quietly(session: Session) -> None:
    try:
        session.close()
    except SQLAlchemyError as exc:
        if not is_transient_error(exc):
            raise
        LOG.debug("Close of a lost database connection: %s", exc)


def unavailable(exc: SQLAlchemyError) -> DatabaseUnavailable:
    """The ``DatabaseUnavailable`` that an availability error becomes (the driver's own
    message as the reason, never the SQL and its parameters)."""
    orig = getattr(exc, "orig", None)
    reason = " ".join(str(orig if orig is not None else exc).split())
    return DatabaseUnavailable(reason=reason or type(exc).__name__)


# -- the one classifier of transient database errors --------------------------------------

#: PostgreSQL SQLSTATEs that say "not now" rather than "not this": connection exceptions
#: (class 08), the server shutting down or starting up (57P01-57P03), too many clients
#: (53300), a database that is not there (3D000: being recreated by a failover), a
#: read-only standby that was just promoted from, or not yet to, primary (25006).
_PG_TRANSIENT_CLASSES = ("08",)
_PG_TRANSIENT_CODES = frozenset({"57P01", "57P02", "57P03", "53300", "3D000", "25006"})
#: MySQL/MariaDB client and server error numbers of the same kind: cannot connect
#: (2002, 2003), gone away or lost (2006, 2013, 2055, 4031), too many connections (1040),
#: unknown database (1049), shutting down (1053), read-only (1290, 1836).
_MYSQL_TRANSIENT_CODES = frozenset(
    {1040, 1049, 1053, 1290, 1836, 2002, 2003, 2006, 2013, 2055, 4031}
)
#: The drivers' words for the same, for errors raised before any SQLSTATE exists (a
#: connect that failed) and for SQLite's lock that outlived ``busy_timeout``.
_TRANSIENT_TEXT = re.compile(
    "|".join(
        (
            r"connection refused",
            r"could not connect",
            r"can't connect",
            r"unable to connect",
            r"server closed the connection",
            r"connection is closed",
            r"connection already closed",
            r"terminating connection",
            r"connection reset",
            r"broken pipe",
            r"connection timed out",
            r"timeout expired",
            r"could not (?:receive|send) data",
            r"consuming input failed",
            r"ssl syscall error",
            r"ssl connection has been closed",
            r"no route to host",
            r"network is unreachable",
            r"temporary failure in name resolution",
            r"the database system is (?:starting up|shutting down|in recovery mode)",
            r"not (?:currently )?accepting connections",
            r"database \S+ does not exist",
            r"unknown database",
            r"too many (?:connections|clients)",
            r"read-only transaction",
            r"lost connection",
            r"server has gone away",
            r"database is locked",
            r"database table is locked",
            r"unable to open database file",
            r"can't reconnect until invalid transaction is rolled back",
        )
    )
)


def is_transient_error(exc: SQLAlchemyError) -> bool:
    """Whether ``exc`` says the database cannot serve *now* (unreachable, restarting,
    failing over, out of connections, SQLite locked) rather than that the request is
    wrong: the one test every caller uses, so that such an error always reaches callers
    as ``DatabaseUnavailable`` and workers wait it out. Conflicts (deadlock, serialization
    failure, integrity) are not transient here: ``compute.claims.retry_on_conflict``
    retries those at once."""
    if isinstance(exc, DisconnectionError | sqlalchemy.exc.TimeoutError):
        return True  # the pool's own: a dead connection, or none free in time
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True  # the dialect recognised a disconnect
    if isinstance(exc, DBAPIError):
        return _transient_code(exc.orig) or _transient_text(str(exc.orig))
    if isinstance(exc, PendingRollbackError):
        # The driver's message only: SQLAlchemy's own text adds the SQL and its
        # parameters, which may quote anything (a fault message saying "connection refused").
        return _transient_text(str(exc).split("Original exception was", 1)[0])
    return False


def _transient_code(orig: object) -> bool:
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if isinstance(sqlstate, str):
        return sqlstate.startswith(_PG_TRANSIENT_CLASSES) or sqlstate in _PG_TRANSIENT_CODES
    args: tuple[object, ...] = tuple(getattr(orig, "args", ()))
    code = args[0] if args else None
    return isinstance(code, int) and code in _MYSQL_TRANSIENT_CODES


def _transient_text(message: str) -> bool:
    return _TRANSIENT_TEXT.search(message.lower()) is not None


def dispose_after_fork() -> None:
    """Drop pooled connections inherited from the parent without closing them under it."""
    for engine in _ENGINES.values():
        engine.dispose(close=False)


def dispose_all() -> None:
    with _LOCK:
        for engine in _ENGINES.values():
            engine.dispose()
        _ENGINES.clear()
        _SESSIONMAKERS.clear()
