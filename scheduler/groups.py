"""Server groups as the scheduler needs them: fresh from the database at decision time."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Instance, ServerGroup
from scheduler.request_spec import InstanceGroup


def load_instance_group(session: Session, group_uuid: str) -> InstanceGroup | None:
    group = session.scalars(select(ServerGroup).where(ServerGroup.uuid == group_uuid)).first()
    if group is None:
        return None
    members = [m.instance_uuid for m in group.members]
    hosts = (
        sorted(
            {
                host
                for host in session.scalars(
                    select(Instance.host).where(
                        Instance.uuid.in_(members),
                        Instance.deleted == 0,
                        Instance.host.is_not(None),
                    )
                )
                if host is not None
            }
        )
        if members
        else []
    )
    return InstanceGroup(
        uuid=group.uuid,
        name=group.name,
        policy=group.policy,
        rules=dict(group.rules or {}),
        members=tuple(members),
        hosts=tuple(hosts),
    )
