"""The public API for consoles: a console URL for a server, and the check a console proxy
makes on the token the URL carries (Nova's ``os-remote-consoles`` and the consoleauth
``validate``); the guest's console log (Nova's ``os-getConsoleOutput``).

``console_log`` is a query to ``compute.<host>`` answered with the tail of the guest's
``console.log``, as Nova's ``get_console_output`` is an RPC call to the compute host: the
file lives in the host's instance directory, which the API's machine need not see (one
machine in tests, many in a deployment). Allowed whenever the server has a host that is
up and is not being deleted or migrated (Nova's ``check_instance_host`` and
``reject_instance_state``; novaq also refuses a down host at once rather than waiting
for an answer that cannot come).

``get_console`` asks the server's host for the guest's domain XML (a query to
``compute.<host>``, as Nova's ``get_serial_console`` is an RPC call to the compute host),
reads the serial console's port from it (``compute.consoles.serial_port``), then stores a
token that expires after ``[consoleauth] token_ttl`` seconds. Only the ``serial`` type
exists in novaq (its guests have no graphics device).

The server must be running on a host whose compute service is up: vm_state ACTIVE,
PAUSED, RESCUED or VERIFY_RESIZE (the states where the guest is defined and started), and
not being deleted or live-migrated (Nova's ``reject_instance_state``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from compute import consoles
from compute.instance_state import get_instance
from compute.states import TaskState, VmState
from models import Instance
from models.db import session_scope
from novaq.exceptions import InstanceInvalidState
from virt.console_log import check_length
from workflows import dispatch, gate
from workflows.api import common
from workflows.api import servers as api_servers
from workflows.api.validation import Int, Seconds, validated
from workflows.canvas import step

CONSOLE_VM_STATES = frozenset({VmState.ACTIVE, VmState.PAUSED, VmState.RESCUED, VmState.RESIZED})
REFUSED_TASK_STATES = frozenset({TaskState.DELETING, TaskState.MIGRATING})
ACTION = "get_console"


@validated()
def get_console(server: str, console_type: str = consoles.SERIAL) -> dict[str, Any]:
    """A console URL for ``server`` (name or uuid): ``{"type", "url", "expires"}``, with
    ``expires`` in epoch seconds. The URL's token is shown here only."""
    consoles.check_console_type(console_type)
    with session_scope(common.db_url(), read_only=True) as session:
        uuid = common.resolve_server(session, server)
        host = _console_host(session, get_instance(session, uuid, with_deleted=False))
    xml = api_servers.diagnostics(uuid)["xml"]
    sessions = common.sessions()
    token = consoles.create_console_token(
        sessions,
        uuid,
        host,
        consoles.serial_port(xml),
        console_type,
        common.settings().consoleauth.token_ttl,
        consoles.SERIAL_BASE_URL,
    )
    row = consoles.validate_token(sessions, token)
    return {
        "type": console_type,
        "url": consoles.access_url(consoles.SERIAL_BASE_URL, token),
        "expires": row["expires"],
    }


@validated()
def validate_console_token(token: str) -> dict[str, Any]:
    """What a console proxy connects to for ``token`` (instance, host, port, type,
    expiry); ``InvalidToken`` if it is unknown, expired, or its server is gone."""
    return consoles.validate_token(common.sessions(), token)


@validated()
def console_log(server: str, length: Int | None = None, timeout: Seconds = 30.0) -> str:
    """The tail of ``server``'s console log (name or uuid): at most its last 100 KiB, then
    its last ``length`` lines when given; "" when the guest has logged nothing yet."""
    length = check_length(length)
    with session_scope(common.db_url(), read_only=True) as session:
        uuid = common.resolve_server(session, server)
        host = _log_host(session, get_instance(session, uuid, with_deleted=False))
    dispatch.check_broker()
    query = step("compute.get_console_output", instance_uuid=uuid, host=host, length=length)
    return str(dispatch.call(query, timeout))


def _log_host(session: Session, instance: Instance) -> str:
    state = dict(
        action="get_console_output",
        uuid=instance.uuid,
        vm_state=instance.vm_state,
        task_state=instance.task_state,
    )
    if instance.task_state in REFUSED_TASK_STATES:
        raise InstanceInvalidState(**state)
    if instance.host is None:
        raise gate.InstanceNotReady(**state)
    if not common.host_is_up(session, instance.host, common.settings()):
        raise gate.InstanceHostDown(action=state["action"], uuid=instance.uuid, host=instance.host)
    return instance.host


def _console_host(session: Session, instance: Instance) -> str:
    state = dict(
        action=ACTION,
        uuid=instance.uuid,
        vm_state=instance.vm_state,
        task_state=instance.task_state,
    )
    if instance.vm_state not in CONSOLE_VM_STATES or instance.task_state in REFUSED_TASK_STATES:
        raise InstanceInvalidState(**state)
    if instance.host is None:
        raise gate.InstanceNotReady(**state)
    if not common.host_is_up(session, instance.host, common.settings()):
        raise gate.InstanceHostDown(action=ACTION, uuid=instance.uuid, host=instance.host)
    return instance.host


__all__ = ["console_log", "get_console", "validate_console_token"]
