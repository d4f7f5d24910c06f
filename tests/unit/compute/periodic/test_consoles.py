"""Console tokens (``compute/consoles.py``) and ``_cleanup_expired_console_auth_tokens``
on SQLite: created, validated, expired, cleaned up; the raw token is never stored."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text, update

from compute import consoles
from compute.periodic import PeriodicContext, runs
from compute.periodic.consoles import cleanup_expired_console_auth_tokens
from compute.periodic.schedule import BY_NAME, CLUSTER
from compute.sessions import sessions_for
from models import ConsoleAuthToken, Instance
from models.db import get_engine, session_scope
from novaq.exceptions import InvalidInput, InvalidToken
from tasks.periodic import run_periodic
from tests.factories import make_instance, make_settings

BASE = consoles.SERIAL_BASE_URL


def _server(db_url: str, host: str = "host1") -> str:
    return make_instance(db_url, vm_state="active", task_state=None, host=host, node=host)


def _token(db_url: str, uuid: str, ttl: int = 600, host: str = "host1", port: int = 10000) -> str:
    return consoles.create_console_token(
        sessions_for(db_url), uuid, host, port, "serial", ttl, BASE
    )


def _expire(db_url: str, token: str, seconds_ago: int = 5) -> None:
    with session_scope(db_url) as session:
        session.execute(
            update(ConsoleAuthToken)
            .where(ConsoleAuthToken.token_hash == consoles.hash_token(token))
            .values(expires=consoles.now_ts() - seconds_ago)
        )


def _rows(db_url: str) -> list[ConsoleAuthToken]:
    with session_scope(db_url) as session:
        return list(session.scalars(select(ConsoleAuthToken).order_by(ConsoleAuthToken.id)))


def test_a_new_token_validates_to_its_console_and_expires_after_the_ttl(db_url: str) -> None:
    uuid = _server(db_url)
    before = consoles.now_ts()
    token = _token(db_url, uuid, ttl=600, port=10003)

    console = consoles.validate_token(sessions_for(db_url), token)

    assert console["instance_uuid"] == uuid and console["host"] == "host1"
    assert (console["port"], console["console_type"]) == (10003, "serial")
    assert console["access_url_base"] == BASE
    assert before + 600 <= console["expires"] <= consoles.now_ts() + 600
    assert consoles.access_url(BASE, token) == f"ws://127.0.0.1:6083/?token={token}"


def test_only_the_sha256_of_the_token_is_stored(db_url: str) -> None:
    token = _token(db_url, _server(db_url))
    [row] = _rows(db_url)
    assert row.token_hash == consoles.hash_token(token) and len(row.token_hash) == 64
    with get_engine(db_url).connect() as conn:
        dump = [
            str(value)
            for r in conn.execute(text("SELECT * FROM console_auth_tokens"))
            for value in r
        ]
    assert not any(token in value for value in dump)


def test_each_console_gets_a_different_unguessable_token(db_url: str) -> None:
    uuid = _server(db_url)
    tokens = {_token(db_url, uuid) for _ in range(5)}
    assert len(tokens) == 5 and all(len(t) >= 40 for t in tokens)


@pytest.mark.parametrize("token", ["", "not-a-token"])
def test_unknown_tokens_are_refused(db_url: str, token: str) -> None:
    _token(db_url, _server(db_url))
    with pytest.raises(InvalidToken):
        consoles.validate_token(sessions_for(db_url), token)


def test_an_expired_token_is_refused_without_repeating_it(db_url: str) -> None:
    token = _token(db_url, _server(db_url))
    _expire(db_url, token, seconds_ago=0)  # expires == now already counts as expired
    with pytest.raises(InvalidToken, match="expired") as raised:
        consoles.validate_token(sessions_for(db_url), token)
    assert token not in str(raised.value)


def test_a_token_of_a_deleted_or_moved_server_is_refused(db_url: str) -> None:
    gone, moved = _server(db_url), _server(db_url)
    gone_token, moved_token = _token(db_url, gone), _token(db_url, moved)
    with session_scope(db_url) as session:
        session.execute(update(Instance).where(Instance.uuid == gone).values(deleted=1))
        session.execute(update(Instance).where(Instance.uuid == moved).values(host="host2"))
    with pytest.raises(InvalidToken, match="deleted"):
        consoles.validate_token(sessions_for(db_url), gone_token)
    with pytest.raises(InvalidToken, match="left host host1"):
        consoles.validate_token(sessions_for(db_url), moved_token)


def test_only_serial_consoles_exist(db_url: str) -> None:
    with pytest.raises(InvalidInput, match="novnc"):
        consoles.create_console_token(
            sessions_for(db_url), _server(db_url), "host1", 5900, "novnc", 60, BASE
        )
    assert _rows(db_url) == []


def _ctx(db_url: str) -> PeriodicContext:
    return PeriodicContext(sessions=sessions_for(db_url), settings=make_settings(), host="cluster")


def test_cleanup_deletes_only_expired_tokens_of_every_host(db_url: str) -> None:
    one, two = _server(db_url, "host1"), _server(db_url, "host2")
    live = _token(db_url, one, ttl=600)
    expired = [_token(db_url, one), _token(db_url, two, host="host2")]
    for token in expired:
        _expire(db_url, token)

    result: dict[str, Any] = cleanup_expired_console_auth_tokens(_ctx(db_url))

    assert result == {"deleted": 2}
    assert [r.token_hash for r in _rows(db_url)] == [consoles.hash_token(live)]
    assert consoles.validate_token(sessions_for(db_url), live)["instance_uuid"] == one
    assert cleanup_expired_console_auth_tokens(_ctx(db_url)) == {"deleted": 0}


def test_serial_port_reads_a_tcp_serial_device_from_the_domain_xml() -> None:
    xml = (
        "<domain><devices><serial type='tcp'><source mode='bind' host='0.0.0.0' "
        "service='10042'/><target port='0'/></serial></devices></domain>"
    )
    assert consoles.serial_port(xml) == 10042


def test_serial_port_of_a_pty_console_is_the_fixed_base_plus_its_target_port() -> None:
    xml = "<domain><devices><serial type='pty'><target port='1'/></serial></devices></domain>"
    assert consoles.serial_port(xml) == consoles.SERIAL_PORT_BASE + 1
    assert consoles.serial_port("<domain><devices/></domain>") == consoles.SERIAL_PORT_BASE


def test_the_cleanup_runs_once_for_the_cluster_through_the_periodic_wrapper(db_url: str) -> None:
    _expire(db_url, _token(db_url, _server(db_url)))

    result = run_periodic(BY_NAME["_cleanup_expired_console_auth_tokens"], CLUSTER, "me")

    assert result == {"deleted": 1}
    record = runs.last_runs(sessions_for(db_url))[("_cleanup_expired_console_auth_tokens", CLUSTER)]
    assert record["last_status"] == "ok" and record["last_result"] == result
