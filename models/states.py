"""The typed states a row holds: Nova's two instance axes (``vm_state`` stable,
``task_state`` in flight), the hypervisor's ``power_state``, and a migration's ``status``
with the table of the changes a writer may make to it.

They live in the data layer because the model columns are typed with them; ``compute``,
``scheduler``, ``virt`` and ``workflows`` import them from here (``compute.states`` and
``virt.power_state`` re-export them under their old names). The string enums compare equal
to the strings Nova stores, so ``instance.vm_state == "active"`` keeps working.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum, StrEnum
from typing import Final

from novaq.exceptions import InvalidMigrationTransition


class VmState(StrEnum):
    ACTIVE = "active"
    BUILDING = "building"
    PAUSED = "paused"
    SUSPENDED = "suspended"
    STOPPED = "stopped"
    RESCUED = "rescued"
    RESIZED = "resized"
    SOFT_DELETED = "soft-delete"
    DELETED = "deleted"
    ERROR = "error"
    SHELVED = "shelved"
    SHELVED_OFFLOADED = "shelved_offloaded"


class TaskState(StrEnum):
    SCHEDULING = "scheduling"
    BLOCK_DEVICE_MAPPING = "block_device_mapping"
    NETWORKING = "networking"
    SPAWNING = "spawning"
    DELETING = "deleting"
    SOFT_DELETING = "soft-deleting"
    RESIZE_PREP = "resize_prep"
    RESIZE_MIGRATING = "resize_migrating"
    RESIZE_MIGRATED = "resize_migrated"
    RESIZE_FINISH = "resize_finish"
    RESIZE_REVERTING = "resize_reverting"
    REBOOTING = "rebooting"
    REBOOT_PENDING = "reboot_pending"
    REBOOT_STARTED = "reboot_started"
    REBOOTING_HARD = "rebooting_hard"
    REBOOT_PENDING_HARD = "reboot_pending_hard"
    REBOOT_STARTED_HARD = "reboot_started_hard"
    PAUSING = "pausing"
    UNPAUSING = "unpausing"
    SUSPENDING = "suspending"
    RESUMING = "resuming"
    POWERING_OFF = "powering-off"
    POWERING_ON = "powering-on"
    RESCUING = "rescuing"
    UNRESCUING = "unrescuing"
    RESTORING = "restoring"
    SHELVING = "shelving"
    SHELVING_OFFLOADING = "shelving_offloading"
    UNSHELVING = "unshelving"
    MIGRATING = "migrating"
    REBUILDING = "rebuilding"
    REBUILD_BLOCK_DEVICE_MAPPING = "rebuild_block_device_mapping"
    REBUILD_SPAWNING = "rebuild_spawning"
    UPDATING_PASSWORD = "updating_password"


class PowerState(IntEnum):
    """Nova's ``nova/compute/power_state.py`` integers (``instances.power_state``)."""

    NOSTATE = 0
    RUNNING = 1
    PAUSED = 3
    SHUTDOWN = 4  # the guest is off (libvirt: shut off or shutting down)
    CRASHED = 6
    SUSPENDED = 7  # libvirt: pmsuspended (a managed-saved guest reports SHUTDOWN, as in Nova)


class MigrationStatus(StrEnum):
    """Every ``migrations.status`` Nova writes (NOVA_BEHAVIOUR.md §1.5). novaq's resize and
    cold migration use the first eleven; the evacuation and live-migration ones are kept so
    that a row Nova wrote reads back and the "in progress" queries name them."""

    PRE_MIGRATING = "pre-migrating"
    MIGRATING = "migrating"
    POST_MIGRATING = "post-migrating"
    FINISHED = "finished"
    CONFIRMING = "confirming"
    CONFIRMED = "confirmed"
    REVERTING = "reverting"
    REVERTED = "reverted"
    ERROR = "error"
    FAILED = "failed"
    DONE = "done"
    ACCEPTED = "accepted"
    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


_S = MigrationStatus

#: The status a migration row is created in (Nova's ``_preallocate_migration`` writes
#: pre-migrating; evacuations and live migrations start accepted).
INITIAL_MIGRATION_STATUSES: Final = frozenset((_S.PRE_MIGRATING, _S.ACCEPTED))

#: from-status -> the statuses a writer may set next. Rewriting the current status is
#: always allowed (a redelivered step repeats its own write). Resize and cold migration:
#: pre-migrating -> migrating -> post-migrating -> finished, then confirming -> confirmed
#: or reverting -> reverted; a delete confirms a same-host move that waits (finished ->
#: confirmed); any step in flight can fail to error, and the periodic cleanup of a deleted
#: instance's leftovers fails an error; a confirm or revert whose publish failed is taken
#: back by the API (confirming or reverting -> finished, ``workflows.api.submit``).
#: Evacuation: accepted -> pre-migrating -> done -> completed (once the source cleaned up),
#: or error (no host) / failed.
#: Live migration: accepted -> queued -> preparing -> running -> post-migrating ->
#: completed, or cancelled.
MIGRATION_TRANSITIONS: Final[Mapping[MigrationStatus, frozenset[MigrationStatus]]] = {
    _S.ACCEPTED: frozenset((_S.PRE_MIGRATING, _S.QUEUED, _S.ERROR, _S.FAILED)),
    _S.PRE_MIGRATING: frozenset((_S.MIGRATING, _S.DONE, _S.ERROR, _S.FAILED)),
    _S.MIGRATING: frozenset((_S.POST_MIGRATING, _S.ERROR)),
    _S.POST_MIGRATING: frozenset((_S.FINISHED, _S.COMPLETED, _S.ERROR, _S.FAILED)),
    _S.FINISHED: frozenset((_S.CONFIRMING, _S.REVERTING, _S.CONFIRMED, _S.ERROR)),
    _S.CONFIRMING: frozenset((_S.CONFIRMED, _S.ERROR, _S.FINISHED)),
    _S.REVERTING: frozenset((_S.REVERTED, _S.ERROR, _S.FINISHED)),
    _S.QUEUED: frozenset((_S.PREPARING, _S.CANCELLED, _S.ERROR, _S.FAILED)),
    _S.PREPARING: frozenset((_S.RUNNING, _S.CANCELLED, _S.ERROR, _S.FAILED)),
    _S.RUNNING: frozenset((_S.POST_MIGRATING, _S.CANCELLED, _S.ERROR, _S.FAILED)),
    _S.ERROR: frozenset((_S.FAILED,)),
    _S.CONFIRMED: frozenset(),
    _S.REVERTED: frozenset(),
    _S.FAILED: frozenset(),
    # The source's start-up recovery cleans up after an evacuation (Nova's
    # _destroy_evacuated_instances).
    _S.DONE: frozenset((_S.COMPLETED,)),
    _S.COMPLETED: frozenset(),
    _S.CANCELLED: frozenset(),
}

#: Nova's ``migration_get_in_progress_by_host_and_node`` excludes these: the move is over.
TERMINAL_MIGRATION_STATUSES: Final = frozenset(
    (_S.CONFIRMED, _S.REVERTED, _S.ERROR, _S.FAILED, _S.COMPLETED, _S.CANCELLED, _S.DONE)
)


def check_migration_transition(
    current: str | None, wanted: str, migration: str | None = None
) -> MigrationStatus:
    """Return ``wanted`` as a MigrationStatus if a migration in ``current`` (None: a row
    being created) may go there; raise InvalidMigrationTransition otherwise."""
    try:
        target = MigrationStatus(wanted)
    except ValueError:
        raise InvalidMigrationTransition(
            migration=migration, current=current, wanted=repr(wanted)
        ) from None
    if current is None:
        allowed: frozenset[MigrationStatus] = INITIAL_MIGRATION_STATUSES
    elif target == current:
        return target
    else:
        allowed = MIGRATION_TRANSITIONS.get(MigrationStatus(current), frozenset())
    if target not in allowed:
        raise InvalidMigrationTransition(migration=migration, current=current, wanted=target)
    return target
