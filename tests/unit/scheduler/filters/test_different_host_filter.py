"""DifferentHostFilter: with the different_host hint, no host running one of those."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


@pytest.fixture
def different(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("DifferentHostFilter")


def test_different_host_filter_passes_every_host_without_the_hint(
    different: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert different.host_passes(host(instances={"vm-1"}), spec()) is True


def test_different_host_filter_accepts_one_uuid_as_a_string(
    different: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(hints={"different_host": "vm-1"})
    assert different.host_passes(host(instances={"vm-1"}), request) is False
    assert different.host_passes(host(instances={"vm-2"}), request) is True


def test_different_host_filter_rejects_a_host_running_any_of_the_listed_instances(
    different: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(hints={"different_host": ["vm-1", "vm-3"]})
    assert different.host_passes(host(instances={"vm-3"}), request) is False
    assert different.host_passes(host(instances={"vm-2", "vm-4"}), request) is True
    assert different.host_passes(host(instances=set()), request) is True


def test_different_host_filter_runs_once_per_request(different: BaseFilter) -> None:
    assert different.run_filter_once_per_request is True


@pytest.mark.parametrize("empty", ["", [""], [None]])
def test_different_host_filter_reads_an_empty_hint_as_no_hint(
    different: BaseFilter, host: HostFactory, spec: SpecFactory, empty: object
) -> None:
    # As Nova's get_scheduler_hint: a one-value list is its value; empty is no hint.
    request = spec(hints={"different_host": empty})
    assert different.ignores(request) is True
    assert different.host_passes(host(instances={"vm-1"}), request) is True
