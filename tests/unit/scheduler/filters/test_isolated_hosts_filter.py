"""IsolatedHostsFilter: Nova's matrix of isolated hosts and isolated images."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


def _isolated(make_filter: Callable[..., BaseFilter], restrict: bool, images: bool) -> BaseFilter:
    return make_filter(
        "IsolatedHostsFilter",
        filter_scheduler={
            "isolated_hosts": ["iso-host"],
            "isolated_images": ["iso-image"] if images else [],
            "restrict_isolated_hosts_to_isolated_images": restrict,
        },
    )


@pytest.mark.parametrize(
    ("host_name", "image", "expected"),
    [
        ("iso-host", "iso-image", True),
        ("iso-host", "cirros", False),
        ("plain-host", "iso-image", False),
        ("plain-host", "cirros", True),
        ("iso-host", "", False),
        ("plain-host", "", True),
    ],
)
def test_isolated_hosts_restricted_keeps_isolated_images_and_hosts_together(
    make_filter: Callable[..., BaseFilter],
    host: HostFactory,
    spec: SpecFactory,
    host_name: str,
    image: str,
    expected: bool,
) -> None:
    flt = _isolated(make_filter, restrict=True, images=True)
    assert flt.host_passes(host(host_name), spec(image=image)) is expected


@pytest.mark.parametrize(
    ("host_name", "image", "expected"),
    [
        ("iso-host", "iso-image", True),
        ("iso-host", "cirros", True),
        ("plain-host", "iso-image", False),
        ("plain-host", "cirros", True),
    ],
)
def test_isolated_hosts_unrestricted_lets_isolated_hosts_take_other_images(
    make_filter: Callable[..., BaseFilter],
    host: HostFactory,
    spec: SpecFactory,
    host_name: str,
    image: str,
    expected: bool,
) -> None:
    flt = _isolated(make_filter, restrict=False, images=True)
    assert flt.host_passes(host(host_name), spec(image=image)) is expected


def test_isolated_hosts_without_isolated_images_refuse_everything_when_restricted(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = _isolated(make_filter, restrict=True, images=False)
    assert flt.host_passes(host("iso-host"), spec(image="cirros")) is False
    assert flt.host_passes(host("plain-host"), spec(image="cirros")) is True


def test_isolated_hosts_without_isolated_images_take_everything_when_not_restricted(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = _isolated(make_filter, restrict=False, images=False)
    assert flt.host_passes(host("iso-host"), spec(image="cirros")) is True


def test_isolated_hosts_filter_passes_everything_with_the_default_settings(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("IsolatedHostsFilter")
    assert flt.host_passes(host(), spec(image="cirros")) is True
    assert flt.run_filter_once_per_request is True


def test_isolated_images_are_image_ids_or_for_convenience_names(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = _isolated(make_filter, restrict=True, images=True)
    by_name = spec(image="5a5a5a5a-0000-4000-8000-000000000005", image_name="iso-image")
    by_id = spec(image="iso-image", image_name="renamed")
    other = spec(image="6b6b6b6b-0000-4000-8000-000000000006", image_name="cirros")

    assert flt.host_passes(host("iso-host"), by_name) is True
    assert flt.host_passes(host("iso-host"), by_id) is True
    assert flt.host_passes(host("iso-host"), other) is False
    assert flt.host_passes(host("plain-host"), by_name) is False
