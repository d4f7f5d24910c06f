"""Nova's ``ComputeManager.handle_lifecycle_event``: a hypervisor lifecycle event
(``virt.event``) brings the instance's power state in step at once, instead of at the
next ``_sync_power_states`` (which stays as the safety net).

For an event about guest ``uuid``:

1. ``[workarounds] handle_virt_lifecycle_events`` off: ignored (the worker does not even
   listen then, as Nova's ``init_host`` does not register);
2. otherwise the periodic sync's own logic for that one instance
   (``compute.periodic.power_sync.sync_instance``): skipped while a task is in flight
   or when the instance moved or is gone; the event is stale when the guest's power
   state now differs from the one it implies (a later change happened), ignored, as
   Nova does; else ``power_state`` written and the vm_state reconciled (an ACTIVE
   server whose guest stopped by itself is stopped through the API, as Nova's
   ``_sync_instance_power_state``). The database is read before the hypervisor is
   asked: most events (every boot's Started) find a task in flight.

STOPPED events reach this only after the driver held them back 15 s (a reboot's start
cancels them; ``virt.libvirt.events``). Refuses to talk to libvirt.
"""

from __future__ import annotations

import logging
from typing import Final

from compute.periodic import PeriodicContext
from compute.periodic.power_sync import STALE, sync_instance
from virt.event import LifecycleEvent

LOG = logging.getLogger(__name__)

IGNORED: Final = "ignored"

__all__ = ["IGNORED", "STALE", "handle_lifecycle_event"]


def handle_lifecycle_event(ctx: PeriodicContext, event: LifecycleEvent) -> str:
    """What the event did: ``ignored``, ``stale``, or the power sync's outcome."""
    if not ctx.settings.workarounds.handle_virt_lifecycle_events:
        return IGNORED
    LOG.info("Instance %s on %s: VM %s (Lifecycle Event)", event.uuid, ctx.host, event.name)
    return sync_instance(ctx, event.uuid, event_power_state=event.power_state)
