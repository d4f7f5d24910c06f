"""AggregateInstanceExtraSpecsFilter: every unscoped flavor extra spec, and every one
scoped ``aggregate_instance_extra_specs:``, must be a metadata key of one of the host's
aggregates with a value that matches it. Specs in any other scope (``capabilities:``,
``hw:``...) are left to other filters.

A key with several values across the host's aggregates passes if any value matches. A
value a numeric operator cannot read (``many`` against ``>= 2``) does not match. Nova 34
raises on it (failing the whole request) unless a matching value happens to come first
in its set's iteration order, which changes with Python's hash seed; novaq's verdict
does not depend on the order.
"""

from __future__ import annotations

import logging

from scheduler.filters import extra_specs_ops
from scheduler.filters.base import BaseFilter
from scheduler.filters.utils import aggregate_values
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

SCOPE = "aggregate_instance_extra_specs"


class AggregateInstanceExtraSpecsFilter(BaseFilter):
    run_filter_once_per_request = True

    def ignores(self, spec: RequestSpec) -> bool:
        return not spec.flavor.extra_specs

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        extra_specs = spec.flavor.extra_specs
        if not extra_specs:
            return True
        metadata = aggregate_values(host)
        for key, req in extra_specs.items():
            scope, scoped, name = key.partition(":")
            if scoped and scope != SCOPE:
                continue
            name = name if scoped else key
            values = metadata.get(name)
            if not values:
                LOG.debug("%s: extra spec %s is not in its aggregates' metadata", host.host, key)
                return False
            if not any(extra_specs_ops.match(value, str(req)) for value in values):
                LOG.debug("%s: aggregate values %s do not match %r", host.host, values, req)
                return False
        return True
