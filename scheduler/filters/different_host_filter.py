"""DifferentHostFilter: with the ``different_host`` hint (one instance UUID or a list),
hosts running any of those instances are refused."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.filters.utils import hint_values, instance_uuids_overlap
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

HINT = "different_host"


class DifferentHostFilter(BaseFilter):
    run_filter_once_per_request = True
    reads_instances = True

    def ignores(self, spec: RequestSpec) -> bool:
        return not hint_values(spec, HINT)

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        uuids = hint_values(spec, HINT)
        if uuids and instance_uuids_overlap(host, uuids):
            LOG.debug("%s runs one of the different_host instances %s", host.host, sorted(uuids))
            return False
        return True
