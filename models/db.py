"""Engine and session handling: one engine per URL per process, short transactions.

``session_scope()`` is the unit of work: commit on success, roll back on error;
``session_scope(url, read_only=True)`` is a reader's, which takes no write lock and may not
write. ``liveness_write(url, statement)`` is a heartbeat's: one write of the liveness table
(``models.liveness``: on SQLite a file of its own, which the main engines attach
read-only) in autocommit on a small engine of its own, which the main database's writers
do not hold up. Worker processes created
by fork call :func:`dispose_after_fork` so no connection crosses a fork (SQLAlchemy's
recommended ``engine.dispose(close=False)``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote

import sqlalchemy.exc
from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError, DisconnectionError, PendingRollbackError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.session import SessionTransactionState
from sqlalchemy.sql import Executable

from models import liveness, outage
from models.pg_connection import use_reader_commits
from novaq.exceptions import DatabaseUnavailable, ReadOnlyTransactionError

LOG = logging.getLogger(__name__)

_ENGINES: dict[str, Engine] = {}
#: SQLite's readers' engines (``reader_engine``), one per database.
_READER_ENGINES: dict[str, Engine] = {}
#: The session factories of each engine, a writer's and a reader's (``read_only``).
#: NOTE: made once: each ``sessionmaker`` is a new Session class, whose event dispatch
#: SQLAlchemy builds again at its first transaction (a quarter of a millisecond).
_MAKERS: dict[tuple[str, bool], sessionmaker[Session]] = {}
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


def _set_up_sqlite_connection(
    dbapi_conn: sqlite3.Connection, database: str | None, query_only: bool = False
) -> None:
    """A new connection of the writers' engine, or of the readers' (``query_only``)."""
    _make_private(database)  # before WAL mode, so -wal/-shm inherit 0600
    # Let pysqlite leave transaction control to us, so the BEGINs of the engines' own
    # ``begin`` listeners work.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # (a new database's: before query_only)
    cur.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
    _attach_liveness(dbapi_conn, database)
    if query_only:
        dbapi_conn.execute("PRAGMA query_only=ON")


def _attach_liveness(dbapi_conn: sqlite3.Connection, database: str | None) -> None:
    """Attach ``database``'s liveness file (``models.liveness``) read-only as schema
    ``liveness``, made first if missing; an in-memory database gets an in-memory one.

    NOTE: read-only is what keeps heartbeats apart from the main database's writers:
    SQLite's ``BEGIN IMMEDIATE`` takes the write lock of every attached database but a
    read-only one, of which it takes a read transaction (a WAL snapshot, which does not
    hold up the heartbeats' commits). The URI filename (``mode=ro``) is read as one
    because the engines' connections are opened with ``uri=True``."""
    path = liveness.sqlite_file(database)
    if path is None:
        dbapi_conn.execute(f"ATTACH ':memory:' AS {liveness.SCHEMA}")
        schema = f"{liveness.SCHEMA}.service_liveness"
        dbapi_conn.execute(liveness.CREATE_SQLITE.replace("service_liveness", schema, 1))
        return
    _create_liveness_file(path)
    uri = "file:" + quote(os.path.abspath(path)) + "?mode=ro"
    dbapi_conn.execute("ATTACH ? AS " + liveness.SCHEMA, (uri,))


def _create_liveness_file(path: str) -> None:
    """Make the liveness file ``path`` (0600, WAL) and its table, if missing.

    NOTE: idempotent and cheap once done (no write: the table is there, the journal mode
    is WAL already), so every new connection of the main engines runs it: a liveness file
    lost, or never made (a main database copied alone), is made again, and the
    heartbeats fill it within ``report_interval``."""
    # NOTE: made with O_EXCL or not opened at all: closing a descriptor of a file drops
    # every POSIX lock this process holds on it, the SQLite connections' too, so another
    # process's connection, closing, took itself for the last one and deleted the WAL
    # under this process's readers ("disk I/O error", boot_bench).
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    _make_private(path)
    conn = sqlite3.connect(path, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(liveness.CREATE_SQLITE)
    finally:
        conn.close()


def _configure_sqlite(engine: Engine) -> None:
    database = engine.url.database

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        _set_up_sqlite_connection(dbapi_conn, database)

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        # NOTE: IMMEDIATE takes the write lock at BEGIN. A deferred transaction that reads
        # then writes can fail with SQLITE_BUSY_SNAPSHOT under concurrent writers, which
        # busy_timeout cannot wait out; IMMEDIATE makes writers queue instead. (Readers
        # have an engine of their own: ``_make_sqlite_reader``.)
        if _Writers.patient:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            _begin_promptly(conn)


#: How often a prompt writer tries SQLite's write lock again, and for how long before it
#: waits as any writer does (in SQLite's busy handler, up to its ``busy_timeout``).
PROMPT_POLL_S = 0.0005
PROMPT_WAIT_S = 5.0
_BUSY_TIMEOUT_MS = 30000


class _Writers:
    """How this process's writers wait for SQLite's write lock (``patient_writers``)."""

    patient = False


def patient_writers() -> None:
    """This process's writers wait for SQLite's write lock in SQLite's busy handler: a
    worker's steps, which nobody waits on call by call. Every other process (the API,
    the command line) is *prompt* (``_begin_promptly``). A worker calls it as it starts,
    before it forks its pool: its children are patient too."""
    _Writers.patient = True


def _begin_promptly(conn: Connection) -> None:
    """``BEGIN IMMEDIATE`` for a writer somebody waits on: tried every ``PROMPT_POLL_S``
    while the lock is taken, for up to ``PROMPT_WAIT_S``, then as any writer's.

    NOTE: SQLite's busy handler sleeps 1, 2, 5, 10, 15, 20, 25... ms between its tries,
    so a writer that finds the lock taken sleeps past the moment it comes free: under
    the workers' load ``api.delete`` waited 9-21 ms for the lock per call, and issuing
    deletes, not the workers, bound deletes/s (issue 16, tenth pass). Only the busy
    timeout of the tries is 0 (a connection setting: no prepared statement is lost);
    a failed try on the driver costs a few µs. An error other than the lock's, or the
    last wait, is the plain BEGIN's to raise, classified as any statement's."""
    driver = conn.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    deadline = time.monotonic() + PROMPT_WAIT_S
    driver.execute("PRAGMA busy_timeout=0")
    try:
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the lock is free: the usual case
            return
        except sqlalchemy.exc.OperationalError as exc:
            if not _sqlite_busy(exc):
                raise
        while time.monotonic() < deadline:
            time.sleep(PROMPT_POLL_S)
            if _began_immediate(driver):
                return
    except sqlite3.OperationalError:
        pass  # not the lock's: the plain BEGIN below raises it, classified
    finally:
        driver.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _make_sqlite_reader(url: str) -> Engine:
    """The engine of SQLite's read-only sessions: connections that are ``query_only`` for
    their whole life, each transaction a deferred ``BEGIN``.

    NOTE: a deferred BEGIN takes no lock: its first SELECT opens a WAL read snapshot,
    which neither waits for writers nor makes them wait; it never writes (query_only), so
    it never needs the upgrade that fails with SQLITE_BUSY_SNAPSHOT. query_only is set
    once, at connect, on connections no writer uses: turning it on and off around each
    reader's transaction on a shared connection (as before issue 16's tenth pass) made
    SQLite expire every prepared statement of that connection at each toggle (a flag
    pragma), so the scheduler's and the API's every statement was compiled again: the
    4-host candidate query 396 µs instead of 45."""
    engine = create_engine(url, connect_args=_SQLITE_CONNECT)
    database = engine.url.database

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        _set_up_sqlite_connection(dbapi_conn, database, query_only=True)

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN")

    event.listen(engine, "handle_error", _refuse_read_only_write)
    return engine


def _configure_mysql(engine: Engine) -> None:
    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        # The driver begins implicitly at the first statement; this sets that transaction's
        # access mode (and only that one's), as PostgreSQL's driver does for
        # ``postgresql_readonly``.
        if conn.get_execution_options().get(_READ_ONLY):
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")


def get_engine(url: str) -> Engine:
    """The process-wide engine for ``url`` (created on first use)."""
    return _cached_engine(_ENGINES, url, _make_engine)


def _cached_engine(cache: dict[str, Engine], url: str, make: Callable[[str], Engine]) -> Engine:
    """``cache``'s engine for ``url``, made by ``make`` once per process (double-checked
    under ``_LOCK``: the fast path takes no lock)."""
    url = _normalise_url(url)
    engine = cache.get(url)
    if engine is not None:
        return engine
    with _LOCK:
        engine = cache.get(url)
        if engine is None:
            engine = cache[url] = make(url)
        return engine


#: SQLite connections: a lock waited for in SQLite's busy handler; URI filenames read as
#: such (the liveness file's ATTACH, ``_attach_liveness``).
_SQLITE_CONNECT = {"timeout": 30, "uri": True}
#: PostgreSQL connections: TCP keepalives on both ends, so a machine cut off the network
#: (not a clean stop) loses its sessions within about 25 s. Without them the server keeps
#: a cut-off compute host's open transaction, and the row locks it holds, until the
#: kernel gives up on the connection (hours): the scheduler's claims and an evacuation of
#: that very host wait on those locks meanwhile. Keepalives, not a limit on how long a
#: transaction may sit idle: a slow step is not a dead machine.
_PG_CONNECT = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "options": "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3",
}
#: The engines on which the liveness table is in the main schema (``models.liveness``).
_IN_MAIN = {"schema_translate_map": liveness.SCHEMA_TRANSLATE}


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args=_SQLITE_CONNECT)
        _configure_sqlite(engine)
    elif url.startswith("postgresql+psycopg"):
        engine = create_engine(
            url,
            pool_size=5,
            max_overflow=10,
            execution_options=_IN_MAIN,
            connect_args=_PG_CONNECT,
            # NOTE: last in, first out: a process's statements run on the connections it
            # used last, so each reaches psycopg's prepare threshold (its sixth execution
            # on a connection) sooner, and the server parses and plans it less often; the
            # connection just checked in also skips the ping (_ping_unless_just_used).
            # issue 16: deletes/s +20-30 % on PostgreSQL in two interleaved pairs.
            pool_use_lifo=True,
        )
        use_reader_commits(engine)
        _ping_unless_just_used(engine)
    else:
        engine = create_engine(
            url, pool_pre_ping=True, pool_size=5, max_overflow=10, execution_options=_IN_MAIN
        )
        if engine.dialect.name in ("mysql", "mariadb"):
            _configure_mysql(engine)
    event.listen(engine, "handle_error", _refuse_read_only_write)
    return engine


#: A pooled PostgreSQL connection checked in this recently, whose socket has nothing to
#: read, is used without a ping (``_ping_unless_just_used``).
_PING_AFTER_IDLE_S = 1.0
_CHECKED_IN_AT = "novaq_checked_in_at"


def _ping_unless_just_used(engine: Engine) -> None:
    """SQLAlchemy's ``pool_pre_ping``, without its round trip for a connection that was in
    use a moment ago and that the server has not closed since.

    A checkout pings (and on a disconnect replaces every pooled connection, as
    ``pool_pre_ping`` does) unless the connection was checked in less than
    ``_PING_AFTER_IDLE_S`` ago and its socket has nothing to read: a server that
    restarts, or an administrator who terminates the backend, or a proxy that cuts the
    connection, closes it, and the closing (EOF, or PostgreSQL's FATAL message) makes
    the socket readable at once. A peer that vanished without a word is not found by a
    ping either (it waits on TCP, as the statement would). A scheduling decision checks
    out two connections back to back: the pings were two of its 13 round trips."""
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_conn, record):  # type: ignore[no-untyped-def]
        if dbapi_conn is not None:  # None: the connection was invalidated
            record.info[_CHECKED_IN_AT] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn, record, _proxy):  # type: ignore[no-untyped-def]
        checked_in_at = record.info.pop(_CHECKED_IN_AT, None)
        if checked_in_at is None:
            return  # a new connection (the info goes with the old one): no ping, as SQLAlchemy
        if time.monotonic() - checked_in_at < _PING_AFTER_IDLE_S and _quiet(dbapi_conn):
            return
        # SQLAlchemy's own pre-ping (the dialect's ping, the engine's handle_error
        # listeners, the disconnect test): False on a disconnect, raises otherwise.
        if not dialect._do_ping_w_event(dbapi_conn):  # noqa: SLF001
            raise sqlalchemy.exc.InvalidatePoolError()


def _quiet(dbapi_conn: object) -> bool:
    """Whether an idle psycopg connection's socket has nothing to read: no EOF, no
    message from the server (an idle session seldom gets one unasked but the one saying
    it is being closed; any other just costs the ping)."""
    try:
        poller = select.poll()
        poller.register(dbapi_conn.pgconn.socket, select.POLLIN)  # type: ignore[attr-defined]
        return not poller.poll(0)
    except Exception:  # noqa: BLE001 -- a closed or broken connection: ping it
        return False


def reader_engine(url: str) -> Engine:
    """The engine of ``url``'s read-only sessions: on SQLite one of its own, whose
    connections never write (``_make_sqlite_reader``); elsewhere the writers' engine,
    each reader's transaction READ ONLY."""
    engine = get_engine(url)
    if engine.dialect.name != "sqlite":
        return engine
    return _cached_engine(_READER_ENGINES, url, _make_sqlite_reader)


def engines_of(url: str) -> list[Engine]:
    """Every engine ``url``'s sessions run on: the writers' and, on SQLite, the readers'
    (for what counts their statements: tests, benchmarks)."""
    engines = [get_engine(url), reader_engine(url)]
    return engines[:1] if engines[0] is engines[1] else engines


def get_sessionmaker(url: str, read_only: bool = False) -> sessionmaker[Session]:
    """The process-wide session factory for ``url`` (a reader's refuses to flush a write)."""
    key = (_normalise_url(url), read_only)
    maker = _MAKERS.get(key)
    if maker is None:
        bind = reader_engine(url) if read_only else get_engine(url)
        maker = sessionmaker(bind=bind, expire_on_commit=False)
        if read_only:
            event.listen(maker, "before_flush", _refuse_writes)
        maker = _MAKERS.setdefault(key, maker)
    return maker


#: The dialects whose default isolation (read committed) lets each statement of a
#: transaction see what others committed meanwhile; ``snapshot`` asks them for one view.
_SNAPSHOT_DIALECTS = frozenset({"postgresql", "mysql", "mariadb"})

#: The execution option that makes a transaction read-only (``session_scope(read_only=True)``),
#: read by the engines' ``begin`` and ``handle_error`` listeners.
_READ_ONLY = "novaq_read_only"


@contextlib.contextmanager
def session_scope(url: str, snapshot: bool = False, read_only: bool = False) -> Iterator[Session]:
    """A transaction: commit when the block succeeds, roll back when it raises.

    ``snapshot``: every statement reads the same committed state (REPEATABLE READ), for a
    reader that compares several tables (the audit): on PostgreSQL's default isolation a
    delete committed between two of its statements would show a server without its
    allocation. SQLite's transaction is one snapshot already.

    ``read_only``: a reader's transaction, which never holds SQLite's write lock (a
    deferred ``BEGIN``: writers neither wait for it nor make it wait) and is ``READ ONLY``
    on PostgreSQL and MariaDB. It ends with a rollback, as it has nothing to commit. A
    write in it, ORM or SQL, raises ``ReadOnlyTransactionError`` and changes nothing.
    Combines with ``snapshot``.

    An error of the database's availability (``is_transient_error``), wherever it comes
    from (the connect, a statement, the commit), is raised as ``DatabaseUnavailable``; a
    rollback or close that fails on the dead connection does not hide it. Inside an
    outage budget (``models.outage``, a worker's task) the transaction first waits for the
    database: nothing has happened in it yet, so waiting there is always safe.
    """
    session = outage.ride_out(
        lambda: _open(url, snapshot, read_only), "Opening a database transaction"
    )
    try:
        yield session
        if read_only:
            # A pending ORM write is refused (``_refuse_writes``), not silently dropped.
            # The close below rolls back: unlike ``rollback()``, it leaves the rows read
            # loaded (as ``expire_on_commit=False`` leaves a writer's).
            session.flush()
        else:
            session.commit()
    except BaseException as exc:
        _rollback_quietly(session)
        if isinstance(exc, SQLAlchemyError) and is_transient_error(exc):
            raise unavailable(exc) from exc
        raise
    finally:
        _close_quietly(session)


def _open(url: str, snapshot: bool = False, read_only: bool = False) -> Session:
    """A session with its connection checked out (pinged: ``pool_pre_ping``, or on
    PostgreSQL ``_ping_unless_just_used``) and its transaction begun, so an unreachable
    database is known before the block runs."""
    session = get_sessionmaker(url, read_only)()
    dialect = get_engine(url).dialect.name
    # Set as the transaction begins; the pool resets them when the connection returns.
    options: dict[str, object] = {}
    if snapshot and dialect in _SNAPSHOT_DIALECTS:
        options["isolation_level"] = "REPEATABLE READ"
    if read_only:
        options[_READ_ONLY] = True
        if dialect == "postgresql":
            options["postgresql_readonly"] = True
    try:
        session.connection(execution_options=options or None)
    except SQLAlchemyError as exc:
        _close_quietly(session)
        if is_transient_error(exc):
            raise unavailable(exc) from exc
        raise
    return session


def _refuse_writes(session: Session, _context: object, _instances: object) -> None:
    """A read-only session's flush: refused when it has anything to write."""
    written = [*session.new, *session.deleted]
    written += [o for o in session.dirty if session.is_modified(o)]
    if written:
        kinds = ", ".join(sorted({type(o).__name__ for o in written}))
        raise ReadOnlyTransactionError(reason=f"the session would write {kinds}")


#: How each database refuses a write in a read-only transaction: SQLite's
#: SQLITE_READONLY (``query_only``), PostgreSQL's 25006, MySQL/MariaDB's 1792.
_READ_ONLY_SQLSTATE = "25006"
_MYSQL_READ_ONLY_TRANSACTION = 1792


def _refuse_read_only_write(context: ExceptionContext) -> None:
    """A statement a read-only transaction's database refused as a write: the clear
    error, at the statement (never taken for a read-only standby, ``is_transient_error``)."""
    conn = context.connection
    exc = context.sqlalchemy_exception
    if conn is None or not conn.get_execution_options().get(_READ_ONLY):
        return
    if isinstance(exc, DBAPIError) and _is_read_only_violation(exc):
        raise ReadOnlyTransactionError(reason=_driver_message(exc)) from exc


def _is_read_only_violation(exc: DBAPIError) -> bool:
    orig = exc.orig
    if getattr(orig, "sqlite_errorname", None) == "SQLITE_READONLY":
        return True
    if (getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)) == _READ_ONLY_SQLSTATE:
        return True
    args: tuple[object, ...] = tuple(getattr(orig, "args", ()))
    return bool(args) and args[0] == _MYSQL_READ_ONLY_TRANSACTION


def _driver_message(exc: DBAPIError) -> str:
    return " ".join(str(exc.orig).split())


def _rollback_quietly(session: Session) -> None:
    if _committed(session):
        # NOTE: the commit went through and an ``after_commit`` listener raised (a
        # service registration's liveness report, ``compute.servicegroup``): nothing is
        # left to roll back. SQLAlchemy refuses a rollback in that state with an
        # ``InvalidRequestError`` that hid the listener's error: an outage that a worker's
        # start-up would have waited out became a crash of the worker.
        return
    try:
        session.rollback()
    except SQLAlchemyError as exc:
        # A dead connection cannot roll back; the server dropped the transaction with it.
        if not is_transient_error(exc):
            raise
        LOG.debug("Rollback on a lost database connection: %s", exc)


def _committed(session: Session) -> bool:
    """Whether the session's transaction has committed and is not closed yet: only while
    its ``after_commit`` listeners run, or after one of them raised."""
    transaction = session.get_transaction()
    # (SQLAlchemy has no public accessor of a transaction's state)
    return transaction is not None and transaction._state is SessionTransactionState.COMMITTED


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


# -- liveness writes: a heartbeat's one statement, on an engine of its own ------------------

_LIVENESS_ENGINES: dict[str, Engine] = {}
_SQLITE_BUSY = 5  # SQLITE_BUSY, whatever its extended code (…_SNAPSHOT, …_RECOVERY)


def liveness_write(url: str, statement: Executable, params: Mapping[str, Any] | None = None) -> int:
    """Run ``statement`` with ``params``, one small write of ``service_liveness``
    (``models.liveness``: a heartbeat), at once and on its own: in autocommit on a small
    engine of its own, so it never waits for a pooled connection nor runs inside another
    transaction. Returns the rows it changed. A statement built once with bind parameters
    costs a quarter of the CPU of one built for each write (its cache key is generated
    again).

    NOTE: on SQLite the engine is the liveness file's, whose write lock only the
    heartbeats take: the main database's writers, which hold theirs most of the time
    under load, never hold a heartbeat up (a heartbeat that waits makes a busy host look
    down). Its connections commit with ``synchronous=NORMAL`` (WAL: no fsync per
    commit); on PostgreSQL with ``synchronous_commit=off`` (no wait for the WAL flush).
    Either can lose the last heartbeats of a machine that loses power, never corrupt
    anything; the next heartbeat writes the same thing again.

    Errors are those of ``session_scope``: an availability error is
    ``DatabaseUnavailable``."""
    return _liveness_try(liveness_engine(url), statement, params)


def _liveness_try(
    engine: Engine,
    statement: Executable,
    params: Mapping[str, Any] | None,
    *,
    stale_retry: bool = True,
) -> int:
    try:
        with engine.begin() as conn:  # (autocommit: its commit is the driver's own)
            return int(getattr(conn.execute(statement, params), "rowcount", 0) or 0)
    except SQLAlchemyError as exc:
        if stale_retry and getattr(exc, "connection_invalidated", False):
            # NOTE: a pooled connection the server closed while it idled (a restart, a
            # terminated backend): SQLAlchemy has invalidated the pool; one more try on a
            # new connection stands for the ping this engine does not send before every
            # heartbeat. Repeating the UPDATE is harmless: a heartbeat stamps the time
            # and bumps a counter.
            return _liveness_try(engine, statement, params, stale_retry=False)
        if is_transient_error(exc):
            raise unavailable(exc) from exc
        raise


def _began_immediate(driver: sqlite3.Connection) -> bool:
    """One try of ``BEGIN IMMEDIATE`` on the driver's connection: True once begun, False
    while another connection holds the write lock; any other error is raised."""
    try:
        driver.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF != _SQLITE_BUSY:
            raise
        return False
    return True


def _sqlite_busy(exc: SQLAlchemyError) -> bool:
    code = getattr(getattr(exc, "orig", None), "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == _SQLITE_BUSY


def liveness_engine(url: str) -> Engine:
    """The engine of ``liveness_write`` for ``url`` (created on first use)."""
    return _cached_engine(_LIVENESS_ENGINES, url, _make_liveness_engine)


def _make_liveness_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        return _make_sqlite_liveness_engine(url)
    # NOTE: no ``pool_pre_ping``: its round trip doubled a heartbeat's, and each round
    # trip is a wait for the GIL in a busy worker (p95 under boot load). A connection found
    # closed is retried once instead (``_liveness_try``).
    engine = create_engine(
        url,
        isolation_level="AUTOCOMMIT",
        pool_size=1,
        max_overflow=2,
        execution_options=_IN_MAIN,
        connect_args=_PG_CONNECT if url.startswith("postgresql") else {},
    )
    if engine.dialect.name == "postgresql":

        @event.listens_for(engine, "connect")
        def _on_pg_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            # A session setting: committed, it holds for the connection's life.
            cur = dbapi_conn.cursor()
            cur.execute("SET synchronous_commit = off")
            cur.close()
            dbapi_conn.commit()

    return engine


def _make_sqlite_liveness_engine(url: str) -> Engine:
    """The liveness file's engine (an in-memory database's: its own engine, whose
    connections each attach a liveness database of their own)."""
    main = make_url(url)
    path = liveness.sqlite_file(main.database)
    if path is None:
        return get_engine(url)
    engine = create_engine(
        main.set(database=path),
        isolation_level="AUTOCOMMIT",
        connect_args={"timeout": _BUSY_TIMEOUT_MS / 1000},
        execution_options=_IN_MAIN,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        _create_liveness_file(path)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    return engine


def dispose_after_fork() -> None:
    """Drop pooled connections inherited from the parent without closing them under it."""
    for engine in _all_engines():
        engine.dispose(close=False)


def dispose_all() -> None:
    with _LOCK:
        for engine in _all_engines():
            engine.dispose()
        _ENGINES.clear()
        _READER_ENGINES.clear()
        _LIVENESS_ENGINES.clear()
        _MAKERS.clear()


def _all_engines() -> list[Engine]:
    return [*_ENGINES.values(), *_READER_ENGINES.values(), *_LIVENESS_ENGINES.values()]
