"""Helpers every part of the public API shares: settings, ids, finding a server by name
or uuid, service liveness."""

from __future__ import annotations

import uuid as uuid_module
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from compute.servicegroup import COMPUTE, is_up
from compute.sessions import Sessions, sessions_for
from models import Instance, InstanceAction, Service
from models.db import session_scope
from novaq.exceptions import ComputeHostNotFound, InstanceNotFound, InvalidInput
from novaq.settings import Settings, get_settings


def settings() -> Settings:
    return get_settings()


def db_url() -> str:
    return settings().sqlalchemy_url


def sessions() -> Sessions:
    """The configured database's transactions, for the domain functions the API calls."""
    return sessions_for(db_url())


def new_request_id() -> str:
    return f"req-{uuid_module.uuid4()}"


def check_uuid(value: str) -> str:
    """The uuid of the server ``value`` names: a uuid as is (canonical), else the name of
    exactly one live server (``resolve_server``), so every call taking a server takes
    its name as the nova client does. Unknown: ``InstanceNotFound``; a name two servers
    share: ``AmbiguousServerName``."""
    try:
        return str(uuid_module.UUID(value))
    except ValueError:
        pass
    with session_scope(db_url(), read_only=True) as session:
        return resolve_server(session, value)


def locked_row(session: Session, uuid: str) -> Instance:
    """The live server ``uuid`` under its row lock, read afresh (a write in the API that
    no compare-and-swap guards: lock, unlock, restore, update)."""
    instance = session.scalars(
        select(Instance)
        .where(Instance.uuid == uuid, Instance.deleted == 0)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).first()
    if instance is None:
        raise InstanceNotFound(uuid=uuid)
    return instance


#: Built once (issue 16: every delete asks it; building the statement cost more than
#: running it).
_COMPUTE_SERVICE = select(Service).where(
    Service.host == bindparam("host"), Service.binary == COMPUTE, Service.deleted == 0
)


def host_is_up(session: Any, host: str, s: Settings) -> bool:
    service = session.scalars(_COMPUTE_SERVICE, {"host": host}).first()
    return service is not None and is_up(service, s)


def check_compute_host(session: Any, host: str) -> str:
    """``host`` names a compute service, deleted or not up aside: a move or a forced
    host naming none is refused before anything is written, as Nova does."""
    found = session.scalars(
        select(Service.id).where(
            Service.host == host, Service.binary == COMPUTE, Service.deleted == 0
        )
    ).first()
    if found is None:
        raise ComputeHostNotFound(host=host)
    return host


def last_action(session: Any, uuid: str, action: str) -> InstanceAction | None:
    return session.scalars(
        select(InstanceAction)
        .where(InstanceAction.instance_uuid == uuid, InstanceAction.action == action)
        .order_by(InstanceAction.id.desc())
    ).first()


def resolve_server(session: Any, server: str) -> str:
    """A server's uuid from its uuid or its name, as the nova client finds servers: a
    uuid is taken as is; a name must match exactly one live server."""
    if not server:
        raise InvalidInput(reason=f"server must be a name or a uuid, got {server!r}")
    try:
        return str(uuid_module.UUID(server))
    except ValueError:
        pass
    uuids = list(
        session.scalars(
            select(Instance.uuid).where(Instance.display_name == server, Instance.deleted == 0)
        )
    )
    if not uuids:
        raise InstanceNotFound(uuid=server)
    if len(uuids) > 1:
        raise AmbiguousServerName(name=server, count=len(uuids))
    return uuids[0]


class AmbiguousServerName(InvalidInput):
    """A name that several live servers share (the nova client's "Multiple server matches
    found"): nothing is done to any of them."""

    msg_fmt = "%(count)d servers are named %(name)r; use a uuid to be more specific."
