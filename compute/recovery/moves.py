"""Start-up recovery of moves (resize, migrate, confirm, revert). By rule 3 of
``compute/recovery/init_host.py`` a move is left to its messages while its migration is in
progress (its redelivered step resumes it, and acting first would make that step fail);
Nova's two resize rows, here, apply once none is.

=================================  ==================================================
found at start (host = this host)  action
=================================  ==================================================
resize_prep, no migration in       task cleared (Nova)
progress
resize_migrating, no migration in  guest back on this (source) host, powered on unless
progress                           ``old_vm_state`` was stopped, task None (Nova)
any other move state               left to its messages (no handler in the table of
                                   ``compute/recovery/init_host.py``)
=================================  ==================================================
"""

from __future__ import annotations

import logging

from compute.build import guest_spec
from compute.instance_state import cas_update, get_instance
from compute.lifecycle import guest_power_state
from compute.moves import active_migration
from compute.pci import held_devices
from compute.recovery.common import Found, Host
from compute.states import TaskState, VmState
from models import Instance
from virt.driver import ComputeDriver, GuestSpec

LOG = logging.getLogger(__name__)


def recover_resize_prep(rc: Host, found: Found) -> str | None:
    """Nova's "resize_prep → task cleared", once no migration is in progress."""
    with rc.sessions() as session:
        if active_migration(session, found.uuid) is not None:
            return None  # prep_resize / resize_instance still to come: theirs
        cas_update(
            session, found.uuid, expected_task_state=[TaskState.RESIZE_PREP], task_state=None
        )
        _pop_old_vm_state(get_instance(session, found.uuid))
    return f"{found.uuid}: resize_prep -> task cleared"


def recover_resize_migrating(rc: Host, found: Found) -> str | None:
    """Nova's "source died mid-copy": the guest back here, powered on unless the server
    was stopped, task None (even when the guest cannot be brought back, as Nova)."""
    with rc.sessions() as session:
        if active_migration(session, found.uuid) is not None:
            return None  # resize_instance is redelivered and resumes
        instance = get_instance(session, found.uuid)
        spec = guest_spec(
            session, instance, tuple(d.address for d in held_devices(session, found.uuid))
        )
        stopped = instance.old_vm_state == VmState.STOPPED
    try:
        _bring_back(rc.driver, spec, stopped)
    except Exception:  # noqa: BLE001 - Nova resets the task anyway
        LOG.exception("Failed to revert crashed migration of instance %s", found.uuid)
    with rc.sessions() as session:
        cas_update(
            session,
            found.uuid,
            expected_task_state=[TaskState.RESIZE_MIGRATING],
            task_state=None,
            power_state=guest_power_state(rc.driver, found.uuid),
        )
        _pop_old_vm_state(get_instance(session, found.uuid))
    LOG.info(
        "Instance %s found in migrating state during startup. Resetting task_state", found.uuid
    )
    return f"{found.uuid}: interrupted resize reverted on {rc.host}"


def _bring_back(driver: ComputeDriver, spec: GuestSpec, stopped: bool) -> None:
    # The originals back from ``<uuid>_resize`` if the copy had begun; the guest defined
    # again if the resize took it down, else started.
    driver.finish_revert_migration(spec, power_on=not stopped)
    if stopped:
        driver.power_off(spec.uuid)


def _pop_old_vm_state(instance: Instance) -> None:
    if instance.old_vm_state is not None:
        instance.old_vm_state = None
