"""IoOpsFilter: fewer than max_io_ops_per_host I/O-heavy operations on the host."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


def test_io_ops_filter_passes_a_host_below_the_limit(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("IoOpsFilter", filter_scheduler={"max_io_ops_per_host": 2})
    assert flt.host_passes(host(num_io_ops=1), spec()) is True


def test_io_ops_filter_rejects_a_host_at_the_limit(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("IoOpsFilter", filter_scheduler={"max_io_ops_per_host": 2})
    assert flt.host_passes(host(num_io_ops=2), spec()) is False


def test_io_ops_filter_defaults_to_nova_limit_of_eight(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("IoOpsFilter")
    assert flt.host_passes(host(num_io_ops=7), spec()) is True
    assert flt.host_passes(host(num_io_ops=8), spec()) is False


def test_io_ops_filter_with_a_limit_of_zero_refuses_every_host(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("IoOpsFilter", filter_scheduler={"max_io_ops_per_host": 0})
    assert flt.host_passes(host(num_io_ops=0), spec()) is False
    assert flt.run_filter_once_per_request is False
