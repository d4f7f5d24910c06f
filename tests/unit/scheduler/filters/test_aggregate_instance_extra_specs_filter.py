"""AggregateInstanceExtraSpecsFilter: unscoped and aggregate_instance_extra_specs: flavor
specs must be matched by the metadata of one of the host's aggregates."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]
SCOPED = "aggregate_instance_extra_specs:"


@pytest.fixture
def agg(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("AggregateInstanceExtraSpecsFilter")


def test_aggregate_specs_filter_passes_a_flavor_without_extra_specs(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert agg.host_passes(host(), spec()) is True


def test_aggregate_specs_filter_passes_a_host_whose_aggregate_matches(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    ssd = host(aggregates=[{"ssd": "true"}])
    assert agg.host_passes(ssd, spec(extra_specs={"ssd": "true"})) is True
    assert agg.host_passes(ssd, spec(extra_specs={SCOPED + "ssd": "true"})) is True


def test_aggregate_specs_filter_rejects_a_host_whose_aggregate_value_differs(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    spinning = host(aggregates=[{"ssd": "false"}])
    assert agg.host_passes(spinning, spec(extra_specs={SCOPED + "ssd": "true"})) is False


def test_aggregate_specs_filter_rejects_a_host_without_the_key(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert agg.host_passes(host(), spec(extra_specs={"ssd": "true"})) is False
    other = host(aggregates=[{"gpu": "true"}])
    assert agg.host_passes(other, spec(extra_specs={"ssd": "true"})) is False


def test_aggregate_specs_filter_ignores_capabilities_and_other_scopes(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(
        extra_specs={"capabilities:hypervisor_type": "QEMU", "hw:cpu_policy": "dedicated"}
    )
    assert agg.host_passes(host(), request) is True


def test_aggregate_specs_filter_needs_one_matching_value_across_aggregates(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    two = host(aggregates=[{"tier": "silver"}, {"tier": "gold"}])
    assert agg.host_passes(two, spec(extra_specs={"tier": "gold"})) is True
    assert agg.host_passes(two, spec(extra_specs={"tier": "bronze"})) is False


def test_aggregate_specs_filter_reads_comma_separated_metadata_as_several_values(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    listed = host(aggregates=[{"tier": "silver, gold"}])
    assert agg.host_passes(listed, spec(extra_specs={"tier": "gold"})) is True


def test_aggregate_specs_filter_matches_with_extra_spec_operators(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    fast = host(aggregates=[{"iops": "5000"}])
    assert agg.host_passes(fast, spec(extra_specs={"iops": ">= 3000"})) is True
    assert agg.host_passes(fast, spec(extra_specs={"iops": ">= 8000"})) is False
    assert agg.host_passes(fast, spec(extra_specs={"iops": "<or> 1000 <or> 5000"})) is True


def test_aggregate_specs_filter_needs_every_spec_to_match(
    agg: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    ssd = host(aggregates=[{"ssd": "true"}])
    request = spec(extra_specs={"ssd": "true", SCOPED + "gpu": "true"})
    assert agg.host_passes(ssd, request) is False


def test_aggregate_specs_filter_runs_once_per_request(agg: BaseFilter) -> None:
    assert agg.run_filter_once_per_request is True
