"""The periodic-task registry and the beat schedule built from it: Nova's names, options,
defaults and spacing semantics (NOVA_BEHAVIOUR.md §7.1-7.2)."""

from __future__ import annotations

import importlib

import pytest

from compute.periodic.schedule import BY_NAME, PERIODIC_TASKS, nova_spacing, scheduled
from novaq.settings import Settings
from tests.factories import make_settings as _make_settings


def make_settings(**overrides: object) -> Settings:
    # The unit tier turns periodic tasks off for its in-thread workers; these tests are
    # about the schedule, so they turn it back on.
    return _make_settings(**{"periodic_enable": True, **overrides})


NOVA_COMPUTE_TASKS = {
    "_check_instance_build_time",
    "_sync_scheduler_instance_info",
    "_heal_instance_info_cache",
    "_poll_rebooting_instances",
    "_poll_rescued_instances",
    "_poll_unconfirmed_resizes",
    "_poll_shelved_instances",
    "_instance_usage_audit",
    "_poll_volume_usage",
    "_sync_power_states",
    "_reclaim_queued_deletes",
    "update_available_resource",
    "_cleanup_running_deleted_instances",
    "_run_image_cache_manager_pass",
    "_run_pending_deletes",
    "_cleanup_incomplete_migrations",
    "_cleanup_expired_console_auth_tokens",
}


def test_every_nova_periodic_task_but_manila_is_registered_once() -> None:
    names = [t.name for t in PERIODIC_TASKS]
    assert len(names) == len(set(names))
    # Nova's, the scheduler's host discovery, and novaq's own reaper of operations in flight.
    assert set(names) == NOVA_COMPUTE_TASKS | {
        "_discover_hosts_in_cells",
        "_reap_operations_in_flight",
    }


@pytest.mark.parametrize("task", PERIODIC_TASKS, ids=lambda t: t.name)
def test_each_task_names_a_function_that_exists(task) -> None:  # type: ignore[no-untyped-def]
    module, _, name = task.function.partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_nova_defaults_give_novas_spacings() -> None:
    spacings = {t.name: s for t, s in scheduled(make_settings())}
    assert spacings == {
        "_check_instance_build_time": 60,
        "_sync_scheduler_instance_info": 120,
        "_poll_rebooting_instances": 60,
        "_poll_rescued_instances": 60,
        "_poll_unconfirmed_resizes": 60,
        "_poll_shelved_instances": 3600,
        "_instance_usage_audit": 60,
        "_poll_volume_usage": 60,
        "_sync_power_states": 600,
        "_reclaim_queued_deletes": 60,
        "update_available_resource": 60,
        "_cleanup_running_deleted_instances": 1800,
        "_run_image_cache_manager_pass": 2400,
        "_run_pending_deletes": 300,
        "_cleanup_incomplete_migrations": 300,
        "_cleanup_expired_console_auth_tokens": 300,
        "_reap_operations_in_flight": 10,  # novaq's own (operation_reap_interval)
    }  # heal cache (-1) and discover hosts (-1) are off by default


def test_zero_means_the_default_spacing_and_negative_means_off() -> None:
    s = make_settings(periodic={"default_spacing": 2})
    assert nova_spacing(0, s) == 2 and nova_spacing(7, s) == 7 and nova_spacing(-1, s) is None
    s = make_settings(
        periodic={"default_spacing": 2},
        sync_power_state_interval=0,
        update_resources_interval=-1,
        scheduler={"discover_hosts_in_cells_interval": 0},
    )
    spacings = {t.name: sp for t, sp in scheduled(s)}
    assert spacings["_sync_power_states"] == 2
    assert spacings["_discover_hosts_in_cells"] == 2
    assert "update_available_resource" not in spacings
    assert spacings["_check_instance_build_time"] == 2  # Nova's hard-coded 60 s, shrunk


def test_heal_info_cache_is_off_at_zero_too_and_volume_usage_idles_at_zero() -> None:
    heal, volume = BY_NAME["_heal_instance_info_cache"], BY_NAME["_poll_volume_usage"]
    assert heal.effective_spacing(make_settings(heal_instance_info_cache_interval=0)) is None
    assert heal.effective_spacing(make_settings(heal_instance_info_cache_interval=5)) == 5
    idle = make_settings(volume_usage_poll_interval=0)
    assert volume.effective_spacing(idle) == 60
    assert volume.gate_reason(idle) == "volume_usage_poll_interval is 0"
    assert volume.effective_spacing(make_settings(volume_usage_poll_interval=-1)) is None


def test_thresholds_are_gates_not_spacings() -> None:
    task = BY_NAME["_poll_unconfirmed_resizes"]
    assert task.effective_spacing(make_settings(resize_confirm_window=3600)) == 60
    assert task.gate_reason(make_settings()) == "resize_confirm_window is 0"
    assert task.gate_reason(make_settings(resize_confirm_window=5)) is None
    track = BY_NAME["_sync_scheduler_instance_info"]
    off = make_settings(filter_scheduler={"track_instance_changes": False})
    assert track.gate_reason(off) == "filter_scheduler.track_instance_changes is 0"


def test_run_immediately_as_nova_marks_it() -> None:
    assert {t.name for t in PERIODIC_TASKS if t.run_immediately} == {
        "_sync_power_states",
        "_cleanup_running_deleted_instances",
        "_discover_hosts_in_cells",
    }


def test_periodic_enable_false_schedules_nothing() -> None:
    assert scheduled(make_settings(periodic_enable=False)) == []
    assert scheduled(make_settings()) != []


def test_a_bad_default_spacing_is_a_clear_error() -> None:
    from novaq.exceptions import ConfigError
    from novaq.settings import load_settings

    with pytest.raises(ConfigError, match=r"\[periodic\] default_spacing"):
        load_settings(periodic={"default_spacing": 0})
    with pytest.raises(ConfigError, match="running_deleted_instance_action"):
        load_settings(running_deleted_instance_action="explode")


def test_task_names_route_per_host_tasks_to_the_host_queue() -> None:
    from tasks.routing import route_task

    task = BY_NAME["_sync_power_states"]
    assert task.task_name == "compute.sync_power_states"
    assert route_task(task.task_name, (), {"host": "h2"}, {}) == {"queue": "compute.h2"}
    cluster = BY_NAME["_cleanup_expired_console_auth_tokens"]
    assert route_task(cluster.task_name, (), {}, {}) == {"queue": "maintenance"}
