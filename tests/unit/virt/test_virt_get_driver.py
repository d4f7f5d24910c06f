from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import virt
from novaq.exceptions import ConfigError
from virt.driver import GuestSpec
from virt.host_profile import HostProfile
from virt.node_xml import test_uri, write_node_xml


@pytest.fixture(autouse=True)
def _forget_drivers() -> Iterator[None]:
    yield
    virt.clear_drivers()


def test_one_driver_per_uri_shares_the_guests(
    tmp_path: Path, gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    uri = test_uri(write_node_xml(gpu_profile, tmp_path))

    first = virt.get_driver(uri)
    first.spawn(plain_spec)
    second = virt.get_driver(uri)

    assert second is first
    assert second.instance_exists(plain_spec.uuid)


def test_other_uris_get_other_drivers(tmp_path: Path, gpu_profile: HostProfile) -> None:
    uri_a = test_uri(write_node_xml(gpu_profile, tmp_path / "a"))
    uri_b = test_uri(write_node_xml(gpu_profile, tmp_path / "b"))

    assert virt.get_driver(uri_a) is not virt.get_driver(uri_b)


def test_conflicting_options_are_a_config_error(tmp_path: Path, gpu_profile: HostProfile) -> None:
    uri = test_uri(write_node_xml(gpu_profile, tmp_path))
    virt.get_driver(uri, fail_spawn=True)

    with pytest.raises(ConfigError, match="already exists with other options"):
        virt.get_driver(uri)


def test_a_real_host_uri_is_accepted_without_connecting() -> None:
    driver = virt.get_driver("qemu:///system")

    assert driver is virt.get_driver("qemu:///system")


def test_guest_options_reach_the_driver_and_may_not_change(
    tmp_path: Path, gpu_profile: HostProfile
) -> None:
    from virt.libvirt.options import GuestOptions

    uri = test_uri(write_node_xml(gpu_profile, tmp_path))
    options = GuestOptions(virt_type="qemu", wait_soft_reboot_seconds=30)

    driver = virt.get_driver(uri, guest_options=options)

    assert driver.options == options  # type: ignore[attr-defined]
    assert virt.get_driver(uri, guest_options=options) is driver
    with pytest.raises(ConfigError, match="already exists with other options"):
        virt.get_driver(uri, guest_options=GuestOptions())
