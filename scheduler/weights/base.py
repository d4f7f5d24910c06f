"""The base of every weigher (one class per module, registered by class name in
``scheduler.weights``) and the aggregate override of its multiplier."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import ClassVar

from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class BaseWeigher:
    """A weigher: ``weigh`` returns the raw value (higher wins before the multiplier);
    ``minval``/``maxval`` bound it and replace the list's min/max in normalisation."""

    minval: ClassVar[float | None] = None
    maxval: ClassVar[float | None] = None
    # The ``[filter_scheduler]`` option, and the aggregate metadata key, of the multiplier.
    option: ClassVar[str] = ""
    #: Whether ``weigh`` reads ``host.instances`` (see ``BaseFilter.reads_instances``).
    reads_instances: ClassVar[bool] = False
    #: Whether ``weigh`` reads ``host.instance_image_props`` (``scheduler.instance_images``
    #: fills them only when such a weigher counts for some candidate).
    reads_instance_images: ClassVar[bool] = False
    # Whether weighing may fail the request (a required metric missing), which Nova does
    # whatever the multiplier: such a weigher is weighed even when every multiplier is 0.
    may_fail_request: ClassVar[bool] = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def multiplier(self, host: HostState) -> float:
        """The multiplier for ``host``: the setting, or its aggregates' override. It must
        depend on the host only through ``host.aggregates``: ``weigh_hosts`` asks it once
        for all the hosts in no aggregate."""
        if not self.option:
            return 1.0
        default = float(getattr(self.settings.filter_scheduler, self.option))
        if not host.aggregates:  # the common case
            return default
        return aggregate_multiplier(host, self.option, default)

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        raise NotImplementedError

    def ignores(self, spec: RequestSpec) -> bool:
        """Whether every host weighs the same for this request (so its instance uuids
        need not be read for this weigher)."""
        return False

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        """``weigh`` of each host, in order; a weigher may compute them in one pass."""
        weigh = self.weigh
        return [weigh(h, spec) for h in hosts]


def aggregate_multiplier(host: HostState, key: str, default: float) -> float:
    """The smallest value of ``key`` in the host's aggregates' metadata, else ``default``.

    As Nova's ``validate_num_values`` inside ``get_weight_multiplier``: if any of the values
    is not a number the whole override is dropped (with a warning) and ``default`` is used.
    NaN and infinities also count as not a number here (Nova would accept them, and one NaN
    makes the ranking meaningless)."""
    values = host.aggregate_metadata().get(key, set())
    if not values:
        return default
    try:
        numbers = [_finite_float(v) for v in sorted(values)]
    except ValueError as exc:
        LOG.warning(
            "Could not decode %r weight multiplier of host %s: %s; using %s",
            key,
            host.host,
            exc,
            default,
        )
        return default
    if len(numbers) > 1:
        LOG.info(
            "%d values of %s found for host %s, using the minimum", len(numbers), key, host.host
        )
    return min(numbers)


def _finite_float(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"could not convert string to a finite float: {value!r}")
    return number
