"""``resume_guests_state_on_host_boot`` at start-up (Nova's ``_resume_guests_state``):
``compute/recovery/init_host.py`` runs it for each instance of the host, after that instance's own
recovery, when the option is on.

=================================  ==================================================
found at start (host = this host)  action
=================================  ==================================================
task None, power_state RUNNING,    the guest rebooted hard (spawned again if the
guest not running                  hypervisor lost it); failure → ERROR
=================================  ==================================================
"""

from __future__ import annotations

import logging

from compute import instance_actions as actions
from compute.build import guest_spec
from compute.instance_state import get_instance
from compute.lifecycle import guest_power_state
from compute.pci import held_devices
from compute.recovery.common import Host
from compute.states import VmState
from models import utcnow
from virt import power_state

LOG = logging.getLogger(__name__)

#: vm_states whose guest is not expected to run (Nova returns early for the first ones).
NO_RESUME = (
    VmState.ERROR,
    VmState.SOFT_DELETED,
    VmState.BUILDING,
    VmState.SHELVED_OFFLOADED,
)


def resume_safely(rc: Host, uuid: str) -> str | None:
    """Start the guest of ``uuid`` again if it should run; on failure, ERROR and a fault."""
    try:
        return _resume_guest_state(rc, uuid)
    except Exception as exc:  # noqa: BLE001 - Nova: the instance goes to ERROR
        LOG.warning("Failed to resume instance %s on %s", uuid, rc.host, exc_info=True)
        with rc.sessions() as session:
            instance = get_instance(session, uuid)
            instance.vm_state, instance.updated_at = VmState.ERROR, utcnow()
            actions.add_fault(session, uuid, exc, rc.host)
        return f"{uuid}: guest could not be resumed -> ERROR"


def _resume_guest_state(rc: Host, uuid: str) -> str | None:
    """Nova's ``_resume_guests_state``: the database says the guest ran, the hypervisor
    says it does not. libvirt's ``resume_state_on_host_boot`` leaves a paused or
    suspended guest as it is and hard-reboots any other (redefining a lost one)."""
    with rc.sessions() as session:
        instance = get_instance(session, uuid)
        if (
            instance.deleted
            or instance.task_state is not None
            or instance.vm_state in NO_RESUME
            or instance.power_state != power_state.RUNNING
        ):
            return None
        spec = guest_spec(session, instance, tuple(d.address for d in held_devices(session, uuid)))
    power = guest_power_state(rc.driver, uuid)
    if power in (power_state.RUNNING, power_state.PAUSED, power_state.SUSPENDED):
        return None
    LOG.info("Rebooting instance %s after nova-compute restart.", uuid)
    if rc.driver.instance_exists(uuid):
        rc.driver.reboot(spec, hard=True)
    else:
        rc.driver.spawn(spec)
    return f"{uuid}: guest resumed (resume_guests_state_on_host_boot)"
