"""ImagePropertiesWeigher: the raw value counts the host's instances whose image shares a
property (name and value, as Nova's image metadata reads them) with the request's image:
one per instance and shared property, or, with ``[filter_scheduler]
image_props_weight_setting`` (``name=ratio`` pairs), that property's ratio per instance
(properties it does not name count 0). A positive ``image_props_weight_multiplier`` packs
instances of like images together, a negative one spreads them; 0 (the default) turns the
weigher off, and the instances' images are then never read.

NOTE: Nova's weigher returns 0 for every host whenever the ``[filter_scheduler]`` option
is 0, even on hosts whose aggregate sets ``image_props_weight_multiplier`` (its shortcut
to skip the cost), so the per-aggregate override Nova documents cannot turn it on; novaq
weighs whenever some candidate's multiplier is not 0, so the override works. The hosts'
counts come from ``scheduler.instance_images`` (one query for all candidates, only then).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from novaq.settings import Settings
from novaq.settings_groups import name_ratio
from scheduler import image_meta_props
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher

LOG = logging.getLogger(__name__)


class ImagePropertiesWeigher(BaseWeigher):
    option: ClassVar[str] = "image_props_weight_multiplier"
    #: Whether the hosts' ``instance_image_props`` must be read for this weigher.
    reads_instance_images: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.ratios = parse_weight_setting(settings.filter_scheduler.image_props_weight_setting)

    def ignores(self, spec: RequestSpec) -> bool:
        return not requested_props(spec)

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        wanted = requested_props(spec)
        if not wanted:
            return [0.0] * len(hosts)
        ratios = self.ratios
        weights = []
        for host in hosts:
            counts = host.instance_image_props
            weight = 0.0
            for prop in wanted:
                count = counts.get(prop, 0)
                if count:
                    weight += (ratios.get(prop[0], 0.0) if ratios else 1.0) * count
            weights.append(weight)
        return weights


def requested_props(spec: RequestSpec) -> frozenset[tuple[str, str]]:
    """The request's image properties as (name, value as Nova spells it); none when they
    cannot be read (refused when the image is stored: an older row may hold one)."""
    if not spec.image_properties:
        return frozenset()
    try:
        values = image_meta_props.read_items(tuple(sorted(spec.image_properties.items())))
    except ValueError as exc:
        LOG.debug("unreadable image properties for %s: %s", spec.instance_uuid, exc)
        return frozenset()
    return frozenset((name, image_meta_props.as_text(v)) for name, v in values.items())


def parse_weight_setting(pairs: Sequence[str]) -> dict[str, float]:
    """``name=ratio`` pairs as a dict (the settings have checked their form)."""
    return dict(name_ratio(pair) for pair in pairs)
