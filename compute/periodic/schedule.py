"""Every periodic task of nova-compute and nova-scheduler, as novaq runs them from celery
beat: Nova's name, the option that sets its spacing and the one that gates it, and Nova's
spacing semantics (NOVA_BEHAVIOUR.md §7.1-7.2).

Spacing, as oslo.service reads the decorator: a positive value is the period in seconds,
0 means the default period (Nova hard-codes 60 s; here ``[periodic] default_spacing``), a
negative value means the task is not scheduled at all. Two tasks keep Nova's exceptions:
``_heal_instance_info_cache`` is off at 0 as well, and ``_poll_volume_usage`` at 0 still
runs every default period but does nothing. Options such as ``resize_confirm_window`` are
thresholds, not spacings: their task runs every default period and is idle while the
threshold is 0.

This module is pure data: ``celeryconfig`` builds beat's schedule from it, the tasks in
``tasks/periodic.py`` run the functions it names, ``novaq periodic-list`` shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from novaq.settings import Settings

#: A task that runs once for the whole cluster (not per host) records its runs under this.
CLUSTER = "cluster"
#: The scope of a task that runs on every up and enabled compute host.
PER_HOST = "compute"


def nova_spacing(value: int, settings: Settings) -> int | None:
    """oslo.service: > 0 as is, 0 the default period, < 0 off."""
    if value < 0:
        return None
    return value or settings.periodic.default_spacing


def _default(settings: Settings) -> int | None:
    return settings.periodic.default_spacing


def _option(name: str) -> Callable[[Settings], int | None]:
    def spacing(settings: Settings) -> int | None:
        return nova_spacing(_get(settings, name), settings)

    return spacing


def _get(settings: Settings, dotted: str) -> int:
    value: Any = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return int(value)


def _heal_spacing(settings: Settings) -> int | None:
    # Nova maps both 0 and negative values of this one to "disabled".
    value = settings.heal_instance_info_cache_interval
    return value if value > 0 else None


@dataclass(frozen=True, slots=True)
class PeriodicTask:
    """One periodic task. ``scope`` is ``PER_HOST`` (runs on every up and enabled compute
    host, through a fan-out) or ``CLUSTER`` (runs once, on the maintenance queue)."""

    name: str
    function: str
    scope: str
    spacing_option: str | None
    spacing: Callable[[Settings], int | None]
    doc: str
    run_immediately: bool = False
    gate_option: str | None = None
    gate: Callable[[Settings], bool] = lambda settings: True

    @property
    def per_host(self) -> bool:
        return self.scope == PER_HOST

    @property
    def task_name(self) -> str:
        """The Celery task that runs it (its queue follows from the prefix)."""
        prefix = "compute" if self.per_host else "periodic"
        return f"{prefix}.{self.name.lstrip('_')}"

    def effective_spacing(self, settings: Settings) -> int | None:
        if not settings.periodic_enable:
            return None
        return self.spacing(settings)

    def gate_reason(self, settings: Settings) -> str | None:
        """Why a scheduled run has nothing to do (Nova's early return), or None."""
        if self.gate(settings):
            return None
        value = _get(settings, self.gate_option) if self.gate_option else None
        return f"{self.gate_option} is {value}"


def _threshold(option: str) -> Callable[[Settings], bool]:
    return lambda settings: _get(settings, option) > 0


PERIODIC_TASKS: tuple[PeriodicTask, ...] = (
    PeriodicTask(
        "_check_instance_build_time",
        "compute.periodic.timeouts:check_instance_build_time",
        PER_HOST,
        None,
        _default,
        "Errors out instances of this host still BUILDING longer than instance_build_timeout.",
        gate_option="instance_build_timeout",
        gate=_threshold("instance_build_timeout"),
    ),
    PeriodicTask(
        "_sync_scheduler_instance_info",
        "compute.periodic.scheduler_sync:sync_scheduler_instance_info",
        PER_HOST,
        "scheduler_instance_sync_interval",
        _option("scheduler_instance_sync_interval"),
        "Compares the guests this host runs with the instances the scheduler counts on it "
        "(the database) and reports every difference.",
        gate_option="filter_scheduler.track_instance_changes",
        gate=lambda s: s.filter_scheduler.track_instance_changes,
    ),
    PeriodicTask(
        "_heal_instance_info_cache",
        "compute.periodic.info_cache:heal_instance_info_cache",
        PER_HOST,
        "heal_instance_info_cache_interval",
        _heal_spacing,
        "Refreshes one instance's cached device info (disks, PCI devices, console) from "
        "the hypervisor per run, rotating through the host's instances.",
    ),
    PeriodicTask(
        "_poll_rebooting_instances",
        "compute.periodic.timeouts:poll_rebooting_instances",
        PER_HOST,
        None,
        _default,
        "Finishes soft reboots stuck longer than reboot_timeout: ACTIVE if the guest runs, "
        "else it is rebooted hard.",
        gate_option="reboot_timeout",
        gate=_threshold("reboot_timeout"),
    ),
    PeriodicTask(
        "_poll_rescued_instances",
        "compute.periodic.timeouts:poll_rescued_instances",
        PER_HOST,
        None,
        _default,
        "Unrescues (through the API, action recorded) servers RESCUED longer than rescue_timeout.",
        gate_option="rescue_timeout",
        gate=_threshold("rescue_timeout"),
    ),
    PeriodicTask(
        "_poll_unconfirmed_resizes",
        "compute.periodic.resize_confirm:poll_unconfirmed_resizes",
        PER_HOST,
        None,
        _default,
        "Confirms (through the API) resizes and migrations to this host left in "
        "VERIFY_RESIZE longer than resize_confirm_window; errors out the unconfirmable.",
        gate_option="resize_confirm_window",
        gate=_threshold("resize_confirm_window"),
    ),
    PeriodicTask(
        "_poll_shelved_instances",
        "compute.periodic.deferred:poll_shelved_instances",
        PER_HOST,
        "shelved_poll_interval",
        _option("shelved_poll_interval"),
        "Offloads servers SHELVED on this host longer than shelved_offload_time.",
        gate_option="shelved_offload_time",
        gate=_threshold("shelved_offload_time"),
    ),
    PeriodicTask(
        "_instance_usage_audit",
        "compute.periodic.usage_audit:instance_usage_audit",
        PER_HOST,
        None,
        _default,
        "Once per instance_usage_audit_period per host: an instance.exists notification "
        "for every instance active in the period, recorded in task_log.",
        gate_option="instance_usage_audit",
        gate=lambda s: s.instance_usage_audit,
    ),
    PeriodicTask(
        "_poll_volume_usage",
        "compute.periodic.volume_usage:poll_volume_usage",
        PER_HOST,
        "volume_usage_poll_interval",
        _option("volume_usage_poll_interval"),
        "Reads each guest disk's I/O counters from the hypervisor into volume_usage_cache "
        "and emits volume.usage notifications.",
        gate_option="volume_usage_poll_interval",
        gate=lambda s: s.volume_usage_poll_interval != 0,
    ),
    PeriodicTask(
        "_sync_power_states",
        "compute.periodic.power_sync:sync_power_states",
        PER_HOST,
        "sync_power_state_interval",
        _option("sync_power_state_interval"),
        "Brings each instance's power_state in line with the hypervisor and stops servers "
        "whose guest stopped behind novaq's back (Nova's rules).",
        run_immediately=True,
    ),
    PeriodicTask(
        "_reclaim_queued_deletes",
        "compute.periodic.deferred:reclaim_queued_deletes",
        PER_HOST,
        None,
        _default,
        "Deletes for good the SOFT_DELETED servers older than reclaim_instance_interval.",
        gate_option="reclaim_instance_interval",
        gate=_threshold("reclaim_instance_interval"),
    ),
    PeriodicTask(
        "update_available_resource",
        "compute.periodic.resources:update_available_resource",
        PER_HOST,
        "update_resources_interval",
        _option("update_resources_interval"),
        "Audits and heals this host's accounting against the hypervisor (see `novaq "
        "heal-list`); also run at worker start.",
    ),
    PeriodicTask(
        "_cleanup_running_deleted_instances",
        "compute.periodic.running_deleted:cleanup_running_deleted_instances",
        PER_HOST,
        "running_deleted_instance_poll_interval",
        _option("running_deleted_instance_poll_interval"),
        "Guests still on the hypervisor whose server was deleted more than "
        "running_deleted_instance_timeout ago: reap, shutdown, log or noop per "
        "running_deleted_instance_action.",
        run_immediately=True,
        gate_option="running_deleted_instance_action",
        gate=lambda s: s.running_deleted_instance_action != "noop",
    ),
    PeriodicTask(
        "_run_image_cache_manager_pass",
        "compute.periodic.image_cache:run_image_cache_manager_pass",
        PER_HOST,
        "image_cache.manager_interval",
        _option("image_cache.manager_interval"),
        "Keeps the base images instances of this host use and removes the others older "
        "than remove_unused_original_minimum_age_seconds from the local image cache.",
    ),
    PeriodicTask(
        "_run_pending_deletes",
        "compute.periodic.cleanup:run_pending_deletes",
        PER_HOST,
        "instance_delete_interval",
        _option("instance_delete_interval"),
        "Removes the files left on this host by deleted servers, up to "
        "maximum_instance_delete_attempts tries each.",
    ),
    PeriodicTask(
        "_cleanup_incomplete_migrations",
        "compute.periodic.cleanup:cleanup_incomplete_migrations",
        PER_HOST,
        "instance_delete_interval",
        _option("instance_delete_interval"),
        "Removes what failed moves of since-deleted servers left on this host (guest, "
        "files); their migration goes from error to failed.",
    ),
    PeriodicTask(
        "_cleanup_expired_console_auth_tokens",
        "compute.periodic.consoles:cleanup_expired_console_auth_tokens",
        CLUSTER,
        "instance_delete_interval",
        _option("instance_delete_interval"),
        "Deletes expired console tokens. Not host-scoped in Nova either, so it runs once "
        "for the cluster instead of once per host.",
    ),
    PeriodicTask(
        "_reap_operations_in_flight",
        "compute.periodic.reaper:reap_operations_in_flight",
        CLUSTER,
        "operation_reap_interval",
        _option("operation_reap_interval"),
        "novaq's own: sends again the step of an operation whose message was lost or whose "
        "worker died, or undoes it with a fault when its host is down (compute/in_flight.py).",
    ),
    PeriodicTask(
        "_discover_hosts_in_cells",
        "scheduler.discover_hosts:discover_hosts_in_cells",
        CLUSTER,
        "scheduler.discover_hosts_in_cells_interval",
        _option("scheduler.discover_hosts_in_cells_interval"),
        "Maps compute hosts not yet mapped to the cell (host_mappings, compute_nodes."
        "mapped). Runs on one scheduler only: the one that takes the message.",
        run_immediately=True,
    ),
)

BY_NAME = {task.name: task for task in PERIODIC_TASKS}


def scheduled(settings: Settings) -> list[tuple[PeriodicTask, int]]:
    """The tasks beat runs with these settings, with their spacing in seconds."""
    return [
        (task, spacing)
        for task in PERIODIC_TASKS
        if (spacing := task.effective_spacing(settings)) is not None
    ]


def beat_schedule_for(settings: Settings) -> dict[str, dict[str, object]]:
    """celery beat's schedule: one entry per scheduled task, named as Nova names it. A
    per-host task's entry is the fan-out (``tasks/periodic.py``); every message beat or
    the fan-out sends expires after one spacing, when the next tick supersedes it."""
    schedule: dict[str, dict[str, object]] = {}
    for task, spacing in scheduled(settings):
        seconds = float(spacing)
        entry: dict[str, object] = {"schedule": seconds, "options": {"expires": seconds}}
        if task.per_host:
            entry["task"] = "periodic.fan_out"
            entry["kwargs"] = {"task_name": task.task_name, "expires_s": seconds}
        else:
            entry["task"] = task.task_name
        schedule[task.name] = entry
    return schedule
