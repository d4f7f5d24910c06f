"""AggregateMultiTenancyIsolation: the projects an aggregate's ``filter_tenant_id*``
metadata lists are the only ones its hosts take; ``tests/differential`` checks it against
Nova's own class."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.filters import BaseFilter
from scheduler.filters.aggregate_multitenancy_isolation import AggregateMultiTenancyIsolation
from scheduler.host_state import HostState
from scheduler.rebuild import RUN_ON_REBUILD
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]
NAME = "AggregateMultiTenancyIsolation"


def test_a_host_without_tenant_metadata_takes_every_project(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter(NAME)
    assert flt.host_passes(host(), spec(project_id="p1")) is True
    other = [{"availability_zone": "az1", "filter_tenant": "p2", "tenant_id": "p2"}]
    assert flt.host_passes(host(aggregates=other), spec(project_id="p1")) is True


def test_an_isolated_host_takes_only_the_listed_projects(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter(NAME)
    isolated = host(aggregates=[{"filter_tenant_id": "p1, p2"}])
    assert flt.host_passes(isolated, spec(project_id="p1")) is True
    assert flt.host_passes(isolated, spec(project_id="p2")) is True
    assert flt.host_passes(isolated, spec(project_id="p3")) is False
    assert flt.host_passes(isolated, spec()) is False  # the demo project is not listed


def test_every_key_with_the_prefix_in_every_aggregate_counts(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter(NAME)
    aggregates = [
        {"filter_tenant_id": "p1", "filter_tenant_id_extra": "p2"},
        {"filter_tenant_id2": " p3 "},
        {"xfilter_tenant_id": "p4"},  # not the prefix: not a list of projects
    ]
    isolated = host(aggregates=aggregates)
    for project in ("p1", "p2", "p3"):
        assert flt.host_passes(isolated, spec(project_id=project)) is True
    assert flt.host_passes(isolated, spec(project_id="p4")) is False


def test_it_runs_once_per_request_and_not_on_rebuild() -> None:
    assert AggregateMultiTenancyIsolation.run_filter_once_per_request is True
    assert NAME not in RUN_ON_REBUILD
