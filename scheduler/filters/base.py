"""The base of every host filter (one class per module, registered by class name in
``scheduler.filters``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


class BaseFilter:
    run_filter_once_per_request: ClassVar[bool] = False
    #: Whether ``host_passes`` reads ``host.instances`` (the uuids are loaded only for a
    #: request that some filter or weigher reading them does not ignore).
    reads_instances: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """The registry key operators use in ``enabled_filters``: the class name."""
        return type(self).__name__

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        raise NotImplementedError

    def reads_stats(self, spec: RequestSpec) -> bool:
        """Whether ``host_passes`` reads, for this request, the ``stats`` counted from
        the hosts' instances (``compute.stats``: ``num_vm_active``, ``num_proj_<id>``...):
        only then are they loaded (one more query). ``failed_builds`` is always there."""
        return False

    def ignores(self, spec: RequestSpec) -> bool:
        """Whether ``host_passes`` is True for every host, whatever its state, for this
        request (it asks nothing the request needs): then no host is asked. A filter
        overrides this only with a condition under which that holds."""
        return False

    def needs_instances(self, spec: RequestSpec) -> bool:
        """Whether ``host_passes`` reads ``host.instances`` for this request (then the
        scheduler loads them). A filter whose need depends on more than ``ignores``
        overrides this."""
        return self.reads_instances and not self.ignores(spec)

    def filter_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[HostState]:
        """The hosts that pass, in their order (Nova's ``filter_all``)."""
        if self.ignores(spec):
            return list(hosts)
        passes = self.host_passes
        return [h for h in hosts if passes(h, spec)]
