"""Deleting a server whose move is unfinished leaves no disks behind on either host (two
simulated hosts with real instance directories, SQLite): the delete of a server in
VERIFY_RESIZE runs on its destination only (it never waits on the source), its move ends
in ``error``, and the source's ``_cleanup_incomplete_migrations`` removes
``<uuid>_resize``; a move that failed half-way is cleaned on both hosts; every step and
pass redelivered is harmless; the accounting ends empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update

from compute import moves
from compute.claims import consumer_allocations
from compute.delete import local_delete, terminate_instance
from compute.instance_actions import start_action
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from compute.periodic.cleanup import cleanup_incomplete_migrations, run_pending_deletes
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import Service
from models.db import session_scope
from models.flavor import FlavorSnapshot
from models.states import MigrationStatus
from tasks import app
from tests.factories import make_settings
from tests.unit.compute.conftest import Hosts
from tests.unit.compute.test_moves_disks import NEW, _ctx, _forward, _request, _server
from workflows import api


def _verify_resize(db_url: str, hosts: Hosts, tmp_path: Path) -> tuple[str, str]:
    """A server resized from src to dst, in VERIFY_RESIZE: originals kept on src."""
    uuid = _server(db_url, hosts, tmp_path, ("dst",))
    migration = _request(db_url, uuid, NEW)
    _forward(db_url, migration, hosts)
    assert hosts["src"].instance_files_exist(uuid) and hosts["dst"].instance_files_exist(uuid)
    return uuid, migration


def _terminate(db_url: str, hosts: Hosts, uuid: str, host: str) -> str:
    with session_scope(db_url) as session:
        start_action(session, uuid, "delete", "req-delete")
    return terminate_instance(
        StepContext(sessions_for(db_url), hosts[host], host, "req-delete"), uuid
    )


def _periodic(db_url: str, hosts: Hosts, host: str) -> dict[str, list[str]]:
    return cleanup_incomplete_migrations(
        PeriodicContext(sessions_for(db_url), make_settings(), host, hosts[host])
    )


def _status(db_url: str, migration: str) -> str:
    with session_scope(db_url) as session:
        return moves.get_migration(session, migration).status


def _nothing_held(db_url: str, uuid: str, migration: str) -> None:
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid) == {}
        assert consumer_allocations(session, migration) == {}


def _no_files(hosts: Hosts, uuid: str) -> None:
    for name, driver in hosts.items():
        assert not driver.instance_files_exist(uuid), name
        if driver.instances_path.exists():
            assert [p.name for p in driver.instances_path.iterdir() if uuid in p.name] == []


@pytest.mark.parametrize("delete", ["terminate", "local"])
def test_a_server_deleted_in_verify_resize_has_its_originals_removed_by_the_sources_next_pass(
    db_url: str, hosts: Hosts, tmp_path: Path, delete: str
) -> None:
    uuid, migration = _verify_resize(db_url, hosts, tmp_path)
    if delete == "terminate":  # the destination deletes; the source is not asked
        assert _terminate(db_url, hosts, uuid, "dst") == "deleted"
        assert _terminate(db_url, hosts, uuid, "dst") == "skipped"  # redelivered
    else:  # the destination was down too: Nova's local delete
        local_delete(sessions_for(db_url), uuid, "req-delete")
        run_pending_deletes(
            PeriodicContext(sessions_for(db_url), make_settings(), "dst", hosts["dst"])
        )
    assert (hosts["src"].instances_path / f"{uuid}_resize").is_dir()
    assert _status(db_url, migration) == "error"
    _nothing_held(db_url, uuid, migration)

    assert _periodic(db_url, hosts, "dst")["cleaned"] == []  # the server's own host: done
    assert _periodic(db_url, hosts, "src") == {
        "cleaned": [uuid],
        "files_left": [],
        "migrations_failed": [migration],
    }
    _no_files(hosts, uuid)
    assert _status(db_url, migration) == "failed"
    assert _periodic(db_url, hosts, "src")["cleaned"] == []  # a second pass: nothing
    _nothing_held(db_url, uuid, migration)


@pytest.mark.parametrize("moved", [True, False], ids=["host-moved", "worker-died-mid-copy"])
def test_a_move_deleted_half_way_is_cleaned_on_both_hosts(
    db_url: str, hosts: Hosts, tmp_path: Path, moved: bool
) -> None:
    """Deleted after resize_instance (the server's host is dst), or after the source
    copied the disks but died before recording it (the server's host is still src):
    the terminate cleans the server's host, the other host's cleanup pass the rest."""
    uuid = _server(db_url, hosts, tmp_path, ("dst",))
    migration = _request(db_url, uuid, NEW)
    moves.prep_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    if moved:
        moves.resize_instance(_ctx(db_url, migration, hosts["src"], "src"))
    else:
        with session_scope(db_url) as session:
            instance = get_instance(session, uuid)
            old = moves.guest_spec(
                session, instance, moves.get_migration(session, migration).flavors.old, []
            )
            new = moves.guest_spec(session, instance, FlavorSnapshot.load(NEW), [])
            moves.get_migration(session, migration).status = MigrationStatus.MIGRATING
        hosts["src"].migrate_disk_and_power_off(old, new, str(hosts["dst"].instances_path))
    assert (hosts["src"].instances_path / f"{uuid}_resize").is_dir()
    assert (hosts["dst"].instances_path / uuid).is_dir()
    host, other = ("dst", "src") if moved else ("src", "dst")

    assert _terminate(db_url, hosts, uuid, host) == "deleted"
    assert _status(db_url, migration) == "error"
    assert not hosts[host].instance_files_exist(uuid)
    assert hosts[other].instance_files_exist(uuid)
    assert _periodic(db_url, hosts, host)["cleaned"] == []
    assert _periodic(db_url, hosts, other)["migrations_failed"] == [migration]
    assert _periodic(db_url, hosts, other)["cleaned"] == []  # redelivered pass: nothing
    _no_files(hosts, uuid)
    assert _status(db_url, migration) == "failed"
    _nothing_held(db_url, uuid, migration)


def test_a_same_host_resize_deleted_in_verify_resize_leaves_nothing(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid = _server(db_url, hosts, tmp_path, ())
    migration = _request(db_url, uuid, NEW, same_host=True)
    _forward(db_url, migration, hosts, dest="src")
    assert _terminate(db_url, hosts, uuid, "src") == "deleted"
    _no_files(hosts, uuid)
    assert _status(db_url, migration) == "confirmed"
    _nothing_held(db_url, uuid, migration)


# -- the API's choice, and the errback -------------------------------------------------------


def _queued(queue: str) -> list[str]:
    """Names of the tasks waiting in ``queue`` (emptied)."""
    names = []
    with app.connection_for_write() as conn:
        simple = conn.SimpleQueue(queue)
        while simple.qsize():
            message = simple.get(block=False)
            names.append(message.headers["task"])
            message.ack()
        simple.close()
    return names


@pytest.mark.parametrize("source_up", [True, False])
def test_the_api_deletes_a_server_in_verify_resize_on_its_destination_only(
    db_url: str, hosts: Hosts, tmp_path: Path, source_up: bool
) -> None:
    uuid, migration = _verify_resize(db_url, hosts, tmp_path)
    if not source_up:
        with session_scope(db_url) as session:
            session.execute(update(Service).where(Service.host == "src").values(forced_down=True))

    api.delete(uuid)

    assert api.show(uuid)["task_state"] == "deleting"
    assert (_queued("compute.src"), _queued("compute.dst")) == ([], ["compute.terminate_instance"])
    assert _status(db_url, migration) == "finished"
