"""The base of every host filter (one class per module, registered by class name in
``scheduler.filters``)."""

from __future__ import annotations

from typing import ClassVar

from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


class BaseFilter:
    run_filter_once_per_request: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """The registry key operators use in ``enabled_filters``: the class name."""
        return type(self).__name__

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        raise NotImplementedError
