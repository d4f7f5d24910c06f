"""What ``api.wait`` watches: a server's status and the operation that is to bring it there.

An operation has ended when its instance action has a ``finish_time`` (every path that ends
one, success or failure, writes it in the transaction that writes the server's final
state). So a wait ends at once when the status is reached, when the server goes to ERROR,
or when the operation ended without reaching the status (a move no host could take: the
server is ACTIVE again, the fault recorded) instead of waiting out its timeout.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.instance_state import get_instance
from models import InstanceAction, InstanceActionEvent, InstanceFault
from novaq.exceptions import InvalidInput, NotFound, OperationFailed
from workflows.api import views


def check_status(status: str) -> str:
    """``status`` as Nova's server status it names; a word that is none is refused with
    the list of those that are."""
    wanted = status.upper()
    if wanted not in views.STATUSES:
        raise InvalidInput(
            reason=f"status must be one of {', '.join(sorted(views.STATUSES))}; got {status!r}",
            field="status",
        )
    return wanted


@dataclass(frozen=True, slots=True)
class Watched:
    """The action of the operation a wait watches.

    ``named``: the caller named its request, so its end ends the wait whatever its
    result. Otherwise it is the server's latest action when the wait began; one that had
    already ended with success then does not end the wait (the server may still change
    by itself, e.g. a guest that shuts down, seen by the power-state sync), one that
    ended in error does.
    """

    action_id: int | None
    named: bool
    ended_before: bool

    @classmethod
    def of(cls, session: Session, uuid: str, request_id: str | None) -> Watched:
        get_instance(session, uuid)  # an unknown server is InstanceNotFound, not a wait
        query = select(InstanceAction).where(InstanceAction.instance_uuid == uuid)
        if request_id is not None:
            query = query.where(InstanceAction.request_id == request_id)
        action = session.scalars(query.order_by(InstanceAction.id.desc())).first()
        if action is None and request_id is not None:
            raise NotFound(f"Instance {uuid} has no action of request {request_id}.")
        return cls(
            action_id=None if action is None else action.id,
            named=request_id is not None,
            ended_before=action is not None and action.finish_time is not None,
        )

    def ended(self, session: Session) -> InstanceAction | None:
        """The action, once its end should end the wait; None while it may go on."""
        if self.action_id is None:
            return None
        action = session.get(InstanceAction, self.action_id, populate_existing=True)
        if action is None or action.finish_time is None:
            return None
        failed = action.message == actions.ERROR
        if self.named or failed or not self.ended_before:
            return action
        return None


def ended_without(
    session: Session, action: InstanceAction, view: dict[str, Any], wanted: str
) -> OperationFailed:
    """The error that ends a wait whose operation ended with the server in another status."""
    return OperationFailed(
        action=action.action,
        uuid=action.instance_uuid,
        status=view["status"],
        wanted=wanted,
        fault=_why(session, action),
    )


def deleted(
    session: Session, watched: Watched, view: dict[str, Any], wanted: str
) -> OperationFailed:
    """The error that ends a wait for a server deleted meanwhile (its operation, skipped
    or superseded by the delete, may never record an end of its own)."""
    action = None if watched.action_id is None else session.get(InstanceAction, watched.action_id)
    return OperationFailed(
        action="operation" if action is None else action.action,
        uuid=view["uuid"],
        status=view["status"],
        wanted=wanted,
        fault="the server was deleted",
    )


def _why(session: Session, action: InstanceAction) -> str:
    """The operation's fault: the server's latest fault since the action began, else its
    failed event's error."""
    if action.message != actions.ERROR:
        return "it succeeded, but the server did not reach that status"
    fault = session.scalars(
        select(InstanceFault)
        .where(
            InstanceFault.instance_uuid == action.instance_uuid,
            InstanceFault.created_at >= _since(action.start_time),
        )
        .order_by(InstanceFault.id.desc())
    ).first()
    if fault is not None:
        return fault.message
    failed = session.scalars(
        select(InstanceActionEvent)
        .where(
            InstanceActionEvent.action_id == action.id,
            InstanceActionEvent.result == actions.ERROR,
        )
        .order_by(InstanceActionEvent.id.desc())
    ).first()
    if failed is not None and failed.details:
        return failed.details
    return "it failed, with no fault recorded"


def _since(start: dt.datetime) -> dt.datetime:
    # NOTE: a fault and its action can be stamped by different clocks (API, workers);
    # a second's slack keeps the fault of a request that failed at once.
    return start - dt.timedelta(seconds=1)
