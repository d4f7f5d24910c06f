"""PostgreSQL sessions carry TCP keepalives on both ends (``models.db._PG_CONNECT``): the
server drops the session of a machine cut off the network, and the row locks its open
transaction holds, within about 25 s instead of hours. The multi-host tier cuts a compute
host mid-transaction; here, what each engine's sessions are set to."""

from __future__ import annotations

from sqlalchemy import text

from models.db import get_engine, liveness_engine

SERVER_SIDE = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")


def _server_settings(engine_url: str, *, liveness: bool) -> list[str]:
    engine = liveness_engine(engine_url) if liveness else get_engine(engine_url)
    with engine.connect() as conn:
        return [str(conn.execute(text(f"SHOW {name}")).scalar()) for name in SERVER_SIDE]


def test_the_main_and_the_liveness_engines_sessions_keep_alive(migrated_pg_url: str) -> None:
    assert _server_settings(migrated_pg_url, liveness=False) == ["10", "5", "3"]
    assert _server_settings(migrated_pg_url, liveness=True) == ["10", "5", "3"]


def test_the_client_side_keeps_alive_too(migrated_pg_url: str) -> None:
    engine = get_engine(migrated_pg_url)
    with engine.connect() as conn:
        params = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    assert (params["keepalives"], params["keepalives_idle"]) == ("1", "10")
    assert (params["keepalives_interval"], params["keepalives_count"]) == ("5", "3")
