"""What the fault-matrix tests share: the operations of the matrix (``make_cases``), and
the wait that runs the reaper of operations in flight until a server has settled."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from compute import in_flight
from compute.periodic.reaper import resend, undo
from compute.sessions import sessions_for
from models import OperationInFlight
from models.db import session_scope
from novaq.settings import get_settings
from workflows import api

FLAVOR = "fm.small"


@dataclass(frozen=True)
class Case:
    """One operation: how to get the server ready, how to ask for it, the point where the
    fault lands, and the statuses the operation may end in (done, or undone)."""

    name: str
    point: str
    prepare: Callable[[], str | None]
    request: Callable[[str | None], str]
    ends: tuple[str, ...]
    #: After a kill, the step is sent again by the reaper (its delivery orphaned by the
    #: restart); otherwise the restarted worker's own recovery (init_host) finishes it.
    resent: bool = False


def _on(call: Callable[[str], Any]) -> Callable[[str | None], str]:
    def request(uuid: str | None) -> str:
        assert uuid is not None
        call(uuid)
        return uuid

    return request


def make_cases(zone: str, source: str, dest: str, flavor: str = FLAVOR) -> list[Case]:
    """The matrix's operations on servers booted on ``source`` (forced through ``zone``)
    and migrated to ``dest``."""

    def boot_request(_: str | None = None) -> str:
        [uuid] = api.boot("fm", flavor, "cirros", availability_zone=f"{zone}:{source}")
        return uuid

    def boot() -> str:
        uuid = boot_request()
        api.wait(uuid, "ACTIVE", timeout=60)
        return uuid

    def migrated() -> str:
        uuid = boot()
        api.migrate(uuid, host=dest)
        api.wait(uuid, "VERIFY_RESIZE", timeout=60)
        return uuid

    migrate = _on(lambda u: api.migrate(u, host=dest))
    moved = ("VERIFY_RESIZE", "ACTIVE")
    return [
        Case("build", "build:act", lambda: None, boot_request, ("ACTIVE", "ERROR")),
        Case("delete", "terminate:act", boot, _on(api.delete), ("DELETED",)),
        Case("migrate-prep", "prep_resize:act", boot, migrate, moved, resent=True),
        Case("migrate-resize", "resize_instance:act", boot, migrate, moved, resent=True),
        Case("migrate-finish", "finish_resize:act", boot, migrate, (*moved, "ERROR"), True),
        Case("confirm", "confirm_resize:act", migrated, _on(api.confirm_resize), ("ACTIVE",), True),
        Case("revert", "revert_resize:act", migrated, _on(api.revert_resize), ("ACTIVE",), True),
        Case("stop", "stop:act", boot, _on(api.stop), ("SHUTOFF", "ACTIVE")),
        Case("migrate", "publish:*", boot, migrate, ()),
    ]


def reap_until_settled(
    uuid: str, ends: tuple[str, ...], timeout_s: float = 90
) -> tuple[dict[str, Any], set[str]]:
    """Run the reaper every second until the server rests in one of ``ends`` with no
    task_state and its operation's record is gone; also what the reaper did to it."""
    sessions = sessions_for(get_settings().sqlalchemy_url)
    deadline = time.monotonic() + timeout_s
    view: dict[str, Any] = {}
    done: set[str] = set()
    while time.monotonic() < deadline:
        summary = in_flight.reap(sessions, get_settings(), resend, undo)
        done |= {action for action, uuids in summary.items() if uuid in uuids}
        view = api.show(uuid)
        if view["status"] in ends and view.get("task_state") is None and not records(uuid):
            return view, done
        time.sleep(1)
    raise AssertionError(f"stuck: {view} records={records(uuid)}")


def records(uuid: str) -> list[str]:
    with session_scope(get_settings().sqlalchemy_url) as session:
        return list(
            session.scalars(
                select(OperationInFlight.task_id).where(OperationInFlight.instance_uuid == uuid)
            )
        )
