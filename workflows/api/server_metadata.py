"""A server's user metadata and description, checked as Nova's API checks them.

Metadata (Nova's ``instance_metadata``) is what ``boot --property`` and ``meta set``
write: keys of 1 to 255 characters from ``[a-zA-Z0-9-_:. ]`` (Nova's
``parameter_types.metadata``), values of at most 255 characters, at most
``MAX_METADATA_ITEMS`` per server (Nova's default ``metadata_items`` quota). A change is a
mapping merged into what the server has, a ``None`` value deleting its key; deleting a
key the server does not have is refused (Nova: "Metadata item was not found").
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from models import Instance, InstanceMetadata
from novaq.exceptions import InvalidInput, NotFound
from workflows.api.validation import shown, text_problem

#: Nova's ``[quota] metadata_items`` default.
MAX_METADATA_ITEMS = 128
#: Nova's metadata key pattern.
KEY = re.compile(r"[a-zA-Z0-9\-_:. ]{1,255}")
MAX_VALUE = 255


class MetadataItemNotFound(NotFound):
    msg_fmt = "Server %(uuid)s has no metadata item %(key)r."


def check_metadata(metadata: Mapping[str, str | None], deleting: bool = False) -> None:
    """Refuse a key or a value Nova refuses (``deleting``: ``None`` values allowed)."""
    for key, value in metadata.items():
        if not KEY.fullmatch(key):
            raise InvalidInput(
                reason=(
                    f"metadata key must be 1 to 255 characters of letters, digits, "
                    f"'-', '_', ':', '.' and spaces, got {shown(key)}"
                ),
                field="metadata",
            )
        if value is None and deleting:
            continue
        problem = None if value is None else text_problem(value, MAX_VALUE, minimum=0)
        if value is None or problem is not None:
            expected = problem or "a string"
            raise InvalidInput(
                reason=f"metadata {key} must be {expected}, got {shown(value)}", field="metadata"
            )


def merged(instance: Instance, change: Mapping[str, str | None]) -> dict[str, str]:
    """The metadata ``instance`` would have after ``change``, checked against the limit."""
    current = instance.metadata_dict
    for key, value in change.items():
        if value is None:
            if key not in current:
                raise MetadataItemNotFound(uuid=instance.uuid, key=key)
            del current[key]
        else:
            current[key] = value
    check_count(current)
    return current


def check_count(metadata: Mapping[str, str]) -> None:
    if len(metadata) > MAX_METADATA_ITEMS:
        raise InvalidInput(
            reason=f"a server has at most {MAX_METADATA_ITEMS} metadata items, got {len(metadata)}",
            field="metadata",
        )


def replace(instance: Instance, metadata: Mapping[str, str]) -> None:
    """Write ``metadata`` as ``instance``'s whole user metadata (rows kept where equal)."""
    rows = {row.key: row for row in instance.metadata_items}
    for key, row in rows.items():
        if key not in metadata:
            instance.metadata_items.remove(row)
        elif row.value != metadata[key]:
            row.value = metadata[key]
    for key in sorted(metadata.keys() - rows.keys()):
        instance.metadata_items.append(InstanceMetadata(key=key, value=metadata[key]))


def check_description(description: str) -> str | None:
    """Nova's description (2.19): at most 255 printable characters; empty clears it."""
    problem = text_problem(description, MAX_VALUE, minimum=0)
    if problem is not None:
        raise InvalidInput(
            reason=f"description must be {problem}, got {shown(description)}", field="description"
        )
    return description or None
