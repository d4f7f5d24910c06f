"""SameHostFilter: with the same_host hint, only hosts running one of those instances."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


@pytest.fixture
def same(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("SameHostFilter")


def test_same_host_filter_passes_every_host_without_the_hint(
    same: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert same.host_passes(host(), spec()) is True
    assert same.host_passes(host(), spec(hints={"same_host": []})) is True


def test_same_host_filter_accepts_one_uuid_as_a_string(
    same: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(hints={"same_host": "vm-1"})
    assert same.host_passes(host(instances={"vm-1"}), request) is True
    assert same.host_passes(host(instances={"vm-2"}), request) is False


def test_same_host_filter_passes_a_host_running_any_of_the_listed_instances(
    same: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(hints={"same_host": ["vm-1", "vm-3"]})
    assert same.host_passes(host(instances={"vm-3", "vm-9"}), request) is True
    assert same.host_passes(host(instances=set()), request) is False


def test_same_host_filter_runs_once_per_request(same: BaseFilter) -> None:
    assert same.run_filter_once_per_request is True


@pytest.mark.parametrize("empty", ["", [""], [None]])
def test_same_host_filter_reads_an_empty_hint_as_no_hint(
    same: BaseFilter, host: HostFactory, spec: SpecFactory, empty: object
) -> None:
    # Nova's RequestSpec.get_scheduler_hint unwraps a one-value list, and an empty
    # value is no hint: every host passes (it used to refuse every host).
    request = spec(hints={"same_host": empty})
    assert same.ignores(request) is True
    assert same.host_passes(host(instances={"vm-1"}), request) is True
