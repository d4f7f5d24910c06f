"""IsolatedHostsFilter: keep ``isolated_images`` on ``isolated_hosts``.

With ``restrict_isolated_hosts_to_isolated_images`` (the default), isolated images run
only on isolated hosts and isolated hosts run only isolated images; without it, isolated
hosts also take other images::

                     isolated image   other image
    isolated host    pass             pass if not restricted
    other host       refuse           pass

With no isolated images configured, an isolated host refuses everything when restricted
and nothing otherwise. ``isolated_images`` lists image ids, as in Nova; an image's name
is accepted too, for convenience (Nova matches ids only: a list of ids, Nova's
configuration, gives Nova's verdicts, ``tests/differential``). A request without an image
is never an isolated one.
"""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class IsolatedHostsFilter(BaseFilter):
    run_filter_once_per_request = True

    def ignores(self, spec: RequestSpec) -> bool:
        # No host is isolated and the image is not: both rows of the table pass.
        group = self.settings.filter_scheduler
        return not group.isolated_hosts and not _image_isolated(spec, group.isolated_images)

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        group = self.settings.filter_scheduler
        restricted = group.restrict_isolated_hosts_to_isolated_images
        host_isolated = host.host in group.isolated_hosts
        image_isolated = _image_isolated(spec, group.isolated_images)
        if restricted:
            passes = image_isolated == host_isolated
        else:
            passes = host_isolated or not image_isolated
        if not passes:
            LOG.debug(
                "%s (isolated: %s) refuses image %r (isolated: %s)",
                host.host,
                host_isolated,
                spec.image,
                image_isolated,
            )
        return passes


def _image_isolated(spec: RequestSpec, isolated_images: tuple[str, ...]) -> bool:
    refs = {ref for ref in (spec.image, spec.image_name) if ref}
    return not refs.isdisjoint(isolated_images)
