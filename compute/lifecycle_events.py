"""Nova's ``ComputeManager.handle_lifecycle_event``: a hypervisor lifecycle event
(``virt.event``) brings the instance's power state in step at once, instead of at the
next ``_sync_power_states`` (which stays as the safety net).

For an event about guest ``uuid``:

1. ``[workarounds] handle_virt_lifecycle_events`` off: ignored (the worker does not even
   listen then, as Nova's ``init_host`` does not register);
2. a host step of this worker is acting on the guest (``compute.busy_guests``: its
   row has a task_state): skipped as the sync skips a pending task, without reading
   the row nor asking the hypervisor (a boot's own Started: most events);
3. the guest's power state now differs from the one the event implies: the event is
   stale (a later change happened), ignored, as Nova does;
4. otherwise the periodic sync's own logic for that one instance
   (``compute.periodic.power_sync.sync_instance``): skipped while a task is in flight
   or when the instance moved or is gone; else ``power_state`` written and the
   vm_state reconciled (an ACTIVE server whose guest stopped by itself is stopped
   through the API, as Nova's ``_sync_instance_power_state``).

STOPPED events reach this only after the driver held them back 15 s (a reboot's start
cancels them; ``virt.libvirt.events``). Refuses to talk to libvirt.
"""

from __future__ import annotations

import logging
from typing import Final

from compute import busy_guests
from compute.lifecycle import guest_power_state
from compute.periodic import PeriodicContext
from compute.periodic.power_sync import PENDING_TASK, sync_instance
from virt import power_state
from virt.event import LifecycleEvent

LOG = logging.getLogger(__name__)

IGNORED: Final = "ignored"
STALE: Final = "stale"


def handle_lifecycle_event(ctx: PeriodicContext, event: LifecycleEvent) -> str:
    """What the event did: ``ignored``, ``stale``, or the power sync's outcome."""
    if not ctx.settings.workarounds.handle_virt_lifecycle_events:
        return IGNORED
    LOG.info("Instance %s on %s: VM %s (Lifecycle Event)", event.uuid, ctx.host, event.name)
    task_state = busy_guests.task_of(event.uuid)
    if task_state is not None:
        # NOTE: a step of this worker is acting on the guest (the event is most likely
        # its own doing): the row has a task_state, which the sync's first look would
        # read only to skip. That read was a transaction per boot (issue 16). Asked
        # before the hypervisor (Nova asks it first): in memory, where the guest's power
        # state is a libvirt call (~60 us), and either way nothing is done.
        LOG.info(
            "During sync_power_state the instance %s has a pending task (%s). Skip.",
            event.uuid,
            task_state,
        )
        return PENDING_TASK
    current = guest_power_state(ctx.hypervisor, event.uuid, quiet=True)
    if current != event.power_state:
        LOG.debug(
            "Instance %s on %s: %s event is stale, the guest is %s now",
            event.uuid,
            ctx.host,
            event.name,
            power_state.NAMES.get(current, str(current)),
        )
        return STALE
    return sync_instance(ctx, event.uuid)
