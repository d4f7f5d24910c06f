"""The image properties of the instances on candidate hosts (what ImagePropertiesWeigher
counts), read in one query for all the hosts, and only when that weigher counts for the
request (``Scheduler.add_weigher_facts``).

An instance's image properties are the ones it kept in its system metadata at boot
(``image_<name>``, ``compute.images.system_metadata``), read back as Nova's
``ImageMeta.from_instance`` does and spelt as Nova's ``str()`` (``scheduler.image_meta_props``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import String, select
from sqlalchemy.orm import Session

from models import Instance
from scheduler import image_meta_props
from scheduler.candidate_sql import one_of
from scheduler.host_state import HostState

LOG = logging.getLogger(__name__)

PREFIX = "image_"
#: System metadata kept of the image that are no properties (Nova's inheritable keys),
#: and properties Nova never keeps there.
NOT_PROPERTIES = frozenset({"min_ram", "min_disk", "disk_format", "container_format"})
SKIPPED = frozenset(
    {"mappings", "block_device_mapping", "img_mappings", "img_block_device_mapping"}
)

_instance = Instance.__table__.c


def add_instance_image_props(session: Session, states: Sequence[HostState]) -> None:
    """Fill each state's ``instance_image_props``: per (property, value), how many of the
    host's live instances have it."""
    if not states:
        return
    hosts = sorted({s.host for s in states})
    query = select(_instance.host, _instance.system_metadata).where(
        _instance.deleted == 0, one_of(session, _instance.host, hosts, String)
    )
    counts: dict[str, Counter[tuple[str, str]]] = {}
    for host, system_metadata in session.connection().execute(query):
        counts.setdefault(host, Counter()).update(instance_props(system_metadata))
    for state in states:
        state.instance_image_props = dict(counts.get(state.host, {}))


def instance_props(system_metadata: Mapping[str, Any] | None) -> frozenset[tuple[str, str]]:
    """An instance's image properties as (name, value as Nova spells it). Values Nova's
    image metadata would refuse (an image stored before novaq checked them) count as no
    properties: Nova's weigher would fail the whole request there."""
    properties = []
    for key, value in (system_metadata or {}).items():
        if value is None:
            continue
        name = key[len(PREFIX) :] if key.startswith(PREFIX) else key
        if name not in NOT_PROPERTIES and name not in SKIPPED and image_meta_props.is_read(name):
            properties.append((name, str(value)))
    try:
        values = image_meta_props.read_items(tuple(sorted(properties)))
    except ValueError as exc:
        LOG.debug("unreadable image properties in system metadata: %s", exc)
        return frozenset()
    return frozenset((name, image_meta_props.as_text(v)) for name, v in values.items())
