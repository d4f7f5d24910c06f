"""The public API's update: a server's name, description and metadata (Nova's
``PUT /servers/{id}`` and its server metadata calls), written in the API under the
server's row lock; nothing is sent to a host."""

from __future__ import annotations

from typing import Annotated, Any

from models import utcnow
from models.db import session_scope
from workflows import gate
from workflows.api import common, flavors, server_metadata, views
from workflows.api.validation import Name, expect, validated

#: A metadata change's value: a string, or None to delete the key.
MetaValue = Annotated[str | None, expect("a string (or None to delete the key)")]


@validated(labels={"name": "server name"}, items={"metadata": "metadata"})
def update(
    server: str,
    name: Name | None = None,
    description: str | None = None,
    metadata: dict[str, MetaValue] | None = None,
) -> dict[str, Any]:
    """Rename a server, set its description (``""`` clears it) and change its metadata
    (merged; a ``None`` value deletes the key). Returns the server. As Nova: a new name
    or description in any state (``update_instance``); metadata only when ACTIVE,
    PAUSED, SUSPENDED or SHUTOFF with no task, and not locked."""
    if name is not None:
        flavors.check_name(name, "server name")
    cleared = None if description is None else server_metadata.check_description(description)
    server_metadata.check_metadata(metadata or {}, deleting=True)
    uuid = common.check_uuid(server)
    with session_scope(common.db_url()) as session:
        instance = common.locked_row(session, uuid)
        if metadata:
            gate.check_instance_state(instance, "update_metadata")
            server_metadata.replace(instance, server_metadata.merged(instance, metadata))
        if name is not None:
            instance.display_name = name
        if description is not None:
            instance.description = cleared
        instance.updated_at = utcnow()
        session.flush()
        return views.instance_dict(session, instance)


__all__ = ["update"]
