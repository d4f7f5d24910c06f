"""ImagePropertiesWeigher: counts the host's instances sharing image properties with the
request (values as Nova's image metadata reads them), weighted by
``image_props_weight_setting`` when set; off by default (multiplier 0)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import ValidationError

from scheduler.host_state import HostState
from scheduler.instance_images import instance_props
from scheduler.weights.image_props import ImagePropertiesWeigher

Host = Callable[..., HostState]

DEBIAN_Q35 = {"image_os_distro": "debian", "image_hw_machine_type": "q35"}


def _counts(*system_metadata: dict[str, str]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for meta in system_metadata:
        for prop in instance_props(meta):
            counts[prop] = counts.get(prop, 0) + 1
    return counts


def test_instance_props_read_the_system_metadata_as_nova(make_settings) -> None:
    meta = {
        "image_architecture": "amd64",
        "image_hw_qemu_guest_agent": "yes",
        "image_min_disk": "1",
        "image_base_image_ref": "abc",
        "locked": "False",
    }
    assert instance_props(meta) == {("hw_architecture", "x86_64"), ("hw_qemu_guest_agent", "True")}
    assert instance_props({"image_hw_disk_bus": "bogus"}) == frozenset()
    assert instance_props(None) == frozenset()


def test_raw_value_counts_shared_properties_per_instance(
    make_host: Host, make_spec, make_settings
) -> None:
    weigher = ImagePropertiesWeigher(make_settings())
    two_debian = make_host(
        "a", instance_image_props=_counts(DEBIAN_Q35, {"image_os_distro": "debian"})
    )
    other = make_host("b", instance_image_props=_counts({"image_os_distro": "ubuntu"}))
    request = make_spec(image_properties={"os_distro": "debian", "hw_machine_type": "q35"})
    # os_distro=debian twice, hw_machine_type=q35 once.
    assert weigher.weigh_all([two_debian, other], request) == [3.0, 0.0]
    assert weigher.weigh_all([two_debian], make_spec()) == [0.0]


def test_values_compare_after_coercion(make_host: Host, make_spec, make_settings) -> None:
    weigher = ImagePropertiesWeigher(make_settings())
    host = make_host("a", instance_image_props=_counts({"image_hw_architecture": "x86_64"}))
    assert weigher.weigh(host, make_spec(image_properties={"architecture": "AMD64"})) == 1.0


def test_the_setting_weighs_each_property_and_ignores_the_others(
    make_host: Host, make_spec, make_settings
) -> None:
    config = make_settings(image_props_weight_setting=("os_distro=2.5", "hw_machine_type=-1"))
    weigher = ImagePropertiesWeigher(config)
    host = make_host("a", instance_image_props=_counts(DEBIAN_Q35, DEBIAN_Q35))
    request = make_spec(
        image_properties={"os_distro": "debian", "hw_machine_type": "q35", "os_type": "linux"}
    )
    assert weigher.weigh(host, request) == 2 * 2.5 + 2 * -1.0


def test_a_bad_setting_is_a_clear_error(make_settings) -> None:
    with pytest.raises(ValidationError, match="not name=ratio"):
        make_settings(image_props_weight_setting=("os_distro",))
    with pytest.raises(ValidationError, match="not name=ratio"):
        make_settings(image_props_weight_setting=("os_distro=high",))


def test_a_positive_multiplier_packs_like_images_a_negative_one_spreads_them(
    make_host: Host, make_spec, make_settings, ranked
) -> None:
    hosts = [
        make_host("empty"),
        make_host("debian", instance_image_props=_counts(DEBIAN_Q35)),
    ]
    request = make_spec(image_properties={"os_distro": "debian"})
    pack = make_settings(image_props_weight_multiplier=1.0)
    spread = make_settings(image_props_weight_multiplier=-1.0)
    assert ranked(["ImagePropertiesWeigher"], hosts, request, config=pack) == ["debian", "empty"]
    assert ranked(["ImagePropertiesWeigher"], list(reversed(hosts)), request, config=spread) == [
        "empty",
        "debian",
    ]
    # Off by default: the order is kept.
    assert ranked(["ImagePropertiesWeigher"], hosts, request) == ["empty", "debian"]


def test_an_aggregate_override_turns_it_on_where_the_option_is_0(
    make_host: Host, make_aggregate, make_spec, ranked
) -> None:
    # Nova's weigher stays at 0 here (its shortcut on the option): see the class docstring.
    pack_here = make_aggregate({"image_props_weight_multiplier": "5"}, hosts=["debian"])
    hosts = [
        make_host("empty"),
        make_host("debian", instance_image_props=_counts(DEBIAN_Q35), aggregates=(pack_here,)),
    ]
    request = make_spec(image_properties={"os_distro": "debian"})
    assert ranked(["ImagePropertiesWeigher"], hosts, request) == ["debian", "empty"]
