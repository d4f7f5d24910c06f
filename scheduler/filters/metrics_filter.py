"""MetricsFilter: pass only the hosts that report every metric ``[metrics]
weight_setting`` weighs (the compute monitors' metrics, ``compute.monitors``), so that
the MetricsWeigher never meets a host without one. With no ``weight_setting`` every host
passes. Not run on a rebuild, as Nova's (``RUN_ON_REBUILD`` False)."""

from __future__ import annotations

import logging

from novaq.settings import Settings
from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class MetricsFilter(BaseFilter):
    """NOTE: Nova's debug line names the host's metrics that are *not* weighed instead of
    the missing ones; novaq names the missing ones."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.keys = frozenset(name for name, _ratio in settings.metrics.weights)

    def ignores(self, spec: RequestSpec) -> bool:
        return not self.keys

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        missing = self.keys - host.metrics.keys()
        if missing:
            LOG.debug("%s does not have the metrics %s", host.host, ", ".join(sorted(missing)))
            return False
        return True
