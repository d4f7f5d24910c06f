"""AggregateImagePropertiesIsolation: a host passes unless one of its aggregates' metadata
keys names an image property the request's image sets, to a value that is none of the
aggregate's (comma-separated) values for that key.

As Nova's: only Nova's image property names count (``scheduler.image_meta_props``; other
metadata keys, ``architecture`` among them, are ignored), and the image's value is the one
Nova's image metadata holds, spelt as Nova's ``str()`` (``amd64`` is ``x86_64``, ``yes`` is
``True``). A property that is unset, false, 0 or empty checks nothing. With
``[filter_scheduler] aggregate_image_properties_isolation_namespace`` set, only keys that
start with the namespace and the separator are looked at, still as whole property names
(so ``hw`` with separator ``_`` checks ``hw_*`` keys; Nova deprecated the option since it
can match nothing else).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from novaq.settings import Settings
from scheduler import image_meta_props
from scheduler.filters.base import BaseFilter
from scheduler.filters.utils import aggregate_values
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class AggregateImagePropertiesIsolation(BaseFilter):
    run_filter_once_per_request = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        if settings.filter_scheduler.aggregate_image_properties_isolation_namespace:
            LOG.warning(
                "[filter_scheduler] aggregate_image_properties_isolation_namespace is "
                "deprecated (Nova 33): only aggregate keys under it that are whole image "
                "property names are checked"
            )

    def ignores(self, spec: RequestSpec) -> bool:
        return not spec.image_properties

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        return self.filter_all((host,), spec) == [host]

    def filter_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[HostState]:
        if self.ignores(spec):
            return list(hosts)
        try:
            props = image_meta_props.read_items(tuple(sorted(spec.image_properties.items())))
        except ValueError as exc:
            # Refused when the image is stored (workflows.api.images_store); an older row
            # may still hold one. Nova refuses such an image before scheduling.
            LOG.debug("unreadable image properties for %s: %s", spec.instance_uuid, exc)
            props = None
        return [h for h in hosts if not h.aggregates or self._passes(h, props)]

    def _passes(self, host: HostState, props: dict[str, Any] | None) -> bool:
        prefix = self._prefix()
        for key, allowed in aggregate_values(host).items():
            if not key.startswith(prefix) or key not in image_meta_props.FIELD_NAMES:
                continue
            if props is None:
                return False
            value = props.get(key)
            if value and image_meta_props.as_text(value) not in allowed:
                LOG.debug("%s: image property %s=%s is none of %s", host.host, key, value, allowed)
                return False
        return True

    def _prefix(self) -> str:
        options = self.settings.filter_scheduler
        namespace = options.aggregate_image_properties_isolation_namespace
        if not namespace:
            return ""
        return namespace + options.aggregate_image_properties_isolation_separator
