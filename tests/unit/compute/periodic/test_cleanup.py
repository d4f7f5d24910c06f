"""``_run_pending_deletes`` and ``_cleanup_incomplete_migrations`` on simulated hosts
(libvirt test:///) with real instance directories in ``tmp_path`` and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute.build import build_and_run_instance
from compute.claims import ResourceRequest
from compute.delete import local_delete, terminate_instance
from compute.instance_actions import start_action
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from compute.periodic.cleanup import cleanup_incomplete_migrations, run_pending_deletes
from compute.sessions import savepoints, sessions_for
from compute.soft_delete import soft_delete_instance
from compute.steps import StepContext
from models import Migration
from models.db import session_scope
from tests.factories import (
    claim,
    make_compute_node,
    make_instance,
    make_migration,
    make_settings,
    rolled_back,
)
from tests.undeletable import release, undeletable
from virt.host_profile import HostProfile
from virt.simulated import SimulatedHostDriver

HOSTS = ("host1", "host2")


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[dict[str, SimulatedHostDriver]]:
    drivers = {}
    for name in HOSTS:
        driver = SimulatedHostDriver(
            HostProfile(name), tmp_path / "hosts" / name, instances_path=tmp_path / name
        )
        driver.init_host(name)
        drivers[name] = driver
    yield drivers
    for driver in drivers.values():
        driver.close()


def _ctx(
    db_url: str, driver: SimulatedHostDriver, host: str = "host1", **settings: Any
) -> PeriodicContext:
    return PeriodicContext(sessions_for(db_url), make_settings(**settings), host, driver)


def _server(db_url: str, driver: SimulatedHostDriver, host: str = "host1") -> str:
    """A server built on ``host`` the real way: claimed, spawned, ACTIVE (files written)."""
    node_id = make_compute_node(db_url, host)
    uuid = make_instance(db_url, host=host, node=host)
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    assert (
        build_and_run_instance(
            StepContext(sessions_for(db_url), driver, host, "req-test"), uuid
        ).outcome
        == "active"
    )
    assert driver.instance_files_exist(uuid)
    return uuid


def _terminate(db_url: str, driver: SimulatedHostDriver, uuid: str, host: str = "host1") -> None:
    with session_scope(db_url) as session:
        start_action(session, uuid, "delete", "req-delete")
    assert (
        terminate_instance(StepContext(sessions_for(db_url), driver, host, "req-delete"), uuid)
        == "deleted"
    )


def _cleaning(db_url: str, uuid: str) -> tuple[int, str | None]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        return instance.cleaned, instance.system_metadata.get("clean_attempts")


def _instance_dir(driver: SimulatedHostDriver, uuid: str) -> Path:
    return driver.instances_path / uuid


# -- the delete path marks what it cleaned -------------------------------------------------------


def test_a_terminate_removes_the_files_and_marks_the_instance_cleaned(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    uuid = _server(db_url, hosts["host1"])

    _terminate(db_url, hosts["host1"], uuid)

    assert not hosts["host1"].instance_files_exist(uuid)
    assert _cleaning(db_url, uuid) == (1, "1")
    assert run_pending_deletes(_ctx(db_url, hosts["host1"])) == {
        "cleaned": [],
        "failed": [],
        "given_up": [],
    }


# -- _run_pending_deletes --------------------------------------------------------------------


def test_files_a_terminate_could_not_remove_are_removed_by_the_next_pass(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    driver = hosts["host1"]
    uuid = _server(db_url, driver)
    with undeletable(_instance_dir(driver, uuid)):
        _terminate(db_url, driver, uuid)
        assert driver.instance_files_exist(uuid)
        assert _cleaning(db_url, uuid) == (0, "1")

    result = run_pending_deletes(_ctx(db_url, driver))

    assert result == {"cleaned": [uuid], "failed": [], "given_up": []}
    assert not driver.instance_files_exist(uuid)
    assert _cleaning(db_url, uuid) == (1, "2")


def test_a_pass_runs_inside_a_transaction_the_test_rolls_back(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    """A periodic pass is handed its transactions: given savepoints of one outer
    transaction, what it records is seen inside and gone once the test rolls back."""
    driver = hosts["host1"]
    uuid = _server(db_url, driver)
    with undeletable(_instance_dir(driver, uuid)):
        _terminate(db_url, driver, uuid)
    with rolled_back(db_url) as session:
        ctx = PeriodicContext(savepoints(session), make_settings(), "host1", driver)
        assert run_pending_deletes(ctx) == {"cleaned": [uuid], "failed": [], "given_up": []}
        inside = get_instance(session, uuid)
        assert (inside.cleaned, inside.system_metadata.get("clean_attempts")) == (1, "2")
    assert not driver.instance_files_exist(uuid)  # the hypervisor's side is not transactional
    assert _cleaning(db_url, uuid) == (0, "1")


def test_each_failed_pass_counts_an_attempt_until_the_maximum_then_the_pass_gives_up(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    driver = hosts["host1"]
    uuid = _server(db_url, driver)
    ctx = _ctx(db_url, driver, maximum_instance_delete_attempts=3)
    directory = _instance_dir(driver, uuid)
    with undeletable(directory):
        _terminate(db_url, driver, uuid)  # attempt 1

        assert run_pending_deletes(ctx)["failed"] == [uuid]  # attempt 2
        assert _cleaning(db_url, uuid) == (0, "2")
        assert run_pending_deletes(ctx)["failed"] == [uuid]  # attempt 3
        assert _cleaning(db_url, uuid) == (0, "3")
        assert run_pending_deletes(ctx)["given_up"] == [uuid]
    release(directory)

    # Deletable again, but the attempts are spent: Nova leaves it to the operator.
    assert run_pending_deletes(ctx) == {"cleaned": [], "failed": [], "given_up": [uuid]}
    assert _cleaning(db_url, uuid) == (0, "3")
    assert driver.instance_files_exist(uuid)


def test_a_server_deleted_by_the_api_while_its_host_was_down_is_cleaned_by_its_host(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    driver = hosts["host1"]
    uuid = _server(db_url, driver)
    local_delete(
        sessions_for(db_url), uuid, "req-delete"
    )  # Nova's local delete: the host never heard
    assert driver.instance_files_exist(uuid) and _cleaning(db_url, uuid) == (0, None)

    result = run_pending_deletes(_ctx(db_url, driver))

    assert result["cleaned"] == [uuid]
    assert not driver.instance_files_exist(uuid)
    assert _cleaning(db_url, uuid) == (1, "1")


def test_soft_deleted_servers_and_other_hosts_deleted_servers_are_left_alone(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    soft = _server(db_url, hosts["host1"])
    with session_scope(db_url) as session:
        start_action(session, soft, "delete", "req-soft")
        get_instance(session, soft).task_state = "soft-deleting"
    assert (
        soft_delete_instance(
            StepContext(sessions_for(db_url), hosts["host1"], "host1", "req-soft"), soft
        )
        == "done"
    )
    elsewhere = _server(db_url, hosts["host2"], host="host2")
    local_delete(sessions_for(db_url), elsewhere, "req-delete")

    result = run_pending_deletes(_ctx(db_url, hosts["host1"]))

    assert result == {"cleaned": [], "failed": [], "given_up": []}
    assert hosts["host1"].instance_files_exist(soft)
    assert hosts["host2"].instance_files_exist(elsewhere)


# -- _cleanup_incomplete_migrations ----------------------------------------------------------


def _migration(db_url: str, instance_uuid: str, source: str, dest: str, status: str) -> str:
    return make_migration(
        db_url, instance_uuid, status=status, source_compute=source, dest_compute=dest
    )


def _status(db_url: str, migration_uuid: str) -> str:
    with session_scope(db_url) as session:
        migration = session.query(Migration).filter_by(uuid=migration_uuid).one()
        return migration.status


def _leftover_on(db_url: str, hosts: dict[str, SimulatedHostDriver], here: str) -> str:
    """A server that was built on ``here`` (guest and files there), then its move failed
    and it ended on the other host, where it was deleted."""
    other = next(h for h in HOSTS if h != here)
    uuid = _server(db_url, hosts[here], host=here)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        instance.host = instance.node = other
    local_delete(sessions_for(db_url), uuid, "req-delete")
    return uuid


@pytest.mark.parametrize("end", ["source", "dest"])
def test_a_failed_move_of_a_deleted_server_is_cleaned_here_and_its_migration_failed(
    db_url: str, hosts: dict[str, SimulatedHostDriver], end: str
) -> None:
    driver = hosts["host1"]
    uuid = _leftover_on(db_url, hosts, "host1")
    source, dest = ("host1", "host2") if end == "source" else ("host2", "host1")
    failed = _migration(db_url, uuid, source, dest, "error")
    assert driver.instance_exists(uuid) and driver.instance_files_exist(uuid)

    result = cleanup_incomplete_migrations(_ctx(db_url, driver))

    assert result == {"cleaned": [uuid], "files_left": [], "migrations_failed": [failed]}
    assert not driver.instance_exists(uuid)
    assert not driver.instance_files_exist(uuid)
    assert _status(db_url, failed) == "failed"
    assert cleanup_incomplete_migrations(_ctx(db_url, driver))["migrations_failed"] == []


def test_error_migrations_of_servers_that_still_live_here_are_left_alone(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    driver = hosts["host1"]
    alive = _server(db_url, driver)
    alive_migration = _migration(db_url, alive, "host1", "host2", "error")
    deleted_here = _server(db_url, driver)
    deleted_migration = _migration(db_url, deleted_here, "host2", "host1", "error")
    with undeletable(_instance_dir(driver, deleted_here)):
        _terminate(db_url, driver, deleted_here)  # its files stay: run_pending_deletes' job

    result = cleanup_incomplete_migrations(_ctx(db_url, driver))

    assert result == {"cleaned": [], "files_left": [], "migrations_failed": []}
    assert _status(db_url, alive_migration) == _status(db_url, deleted_migration) == "error"
    assert driver.instance_exists(alive) and driver.instance_files_exist(alive)
    assert driver.instance_files_exist(deleted_here)


def test_migrations_not_in_error_or_not_involving_this_host_are_left_alone(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    driver = hosts["host1"]
    uuid = _leftover_on(db_url, hosts, "host1")
    confirmed = _migration(db_url, uuid, "host1", "host2", "confirmed")
    elsewhere = _migration(db_url, uuid, "host2", "host3", "error")

    result = cleanup_incomplete_migrations(_ctx(db_url, driver))

    assert result["migrations_failed"] == []
    assert (_status(db_url, confirmed), _status(db_url, elsewhere)) == ("confirmed", "error")
    assert driver.instance_files_exist(uuid)


def test_a_failed_move_whose_files_will_not_go_is_still_failed_and_reported(
    db_url: str, hosts: dict[str, SimulatedHostDriver]
) -> None:
    driver = hosts["host1"]
    uuid = _leftover_on(db_url, hosts, "host1")
    failed = _migration(db_url, uuid, "host1", "host2", "error")

    with undeletable(_instance_dir(driver, uuid)):
        result = cleanup_incomplete_migrations(_ctx(db_url, driver))

    assert result == {"cleaned": [], "files_left": [uuid], "migrations_failed": [failed]}
    assert not driver.instance_exists(uuid)
    assert _status(db_url, failed) == "failed"
