"""Fixtures for the hypervisor layer: a fresh ``test:///<tmp>/node.xml`` per test,
drivers closed at teardown, GuestSpecs, and golden XML files.

Golden files live in ``tests/data/xml``; run with ``NOVAQ_REGENERATE_GOLDEN=1`` to
rewrite them (an environment variable, because ``pytest_addoption`` only works in
the root conftest), then review the diff.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from virt.driver import GuestSpec, HostResources, ImageSpec, PciDevice
from virt.host_profile import HostProfile, default_profiles
from virt.libvirt.driver import LibvirtDriver
from virt.node_xml import test_uri, write_node_xml

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "data" / "xml"
REGENERATE_VARIABLE = "NOVAQ_REGENERATE_GOLDEN"


REGENERATE = os.environ.get(REGENERATE_VARIABLE) == "1"

UUID_1 = "6c4ab0a2-8ad5-4bd5-9d9c-1b0b8b0b3f11"
UUID_2 = "0e5c2c52-3b4f-4b8e-a4a7-3c4b8f0d9e22"
GPU_ADDRESSES = ("0000:08:00.0", "0000:88:00.0")

MakeDriver = Callable[..., LibvirtDriver]


@pytest.fixture
def gpu_profile() -> HostProfile:
    """host1 of the default fleet: 16 vCPUs, 32768 MiB, 500 GiB, two M4000 GPUs."""
    return default_profiles(1)[0]


@pytest.fixture
def make_driver(tmp_path: Path) -> Iterator[MakeDriver]:
    """Build a ``LibvirtDriver`` on a fresh node file in ``tmp_path``; closed at teardown."""
    drivers: list[LibvirtDriver] = []

    def make(
        profile: HostProfile, domains: tuple[str, ...] = (), fail_spawn: bool = False
    ) -> LibvirtDriver:
        directory = tmp_path / f"node{len(drivers)}"
        uri = test_uri(write_node_xml(profile, directory, domains))
        driver = LibvirtDriver(uri, fail_spawn=fail_spawn, instances_path=tmp_path / "instances")
        driver.init_host(profile.name)
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.close()


@pytest.fixture
def driver(make_driver: MakeDriver, gpu_profile: HostProfile) -> LibvirtDriver:
    return make_driver(gpu_profile)


@pytest.fixture
def plain_spec() -> GuestSpec:
    return GuestSpec(
        uuid=UUID_1,
        name="plain",
        vcpus=2,
        memory_mb=2048,
        root_gb=20,
        image=ImageSpec(id="cirros", name="cirros", location=""),
    )


@pytest.fixture
def gpu_spec() -> GuestSpec:
    return GuestSpec(
        uuid=UUID_2,
        name="gpu",
        vcpus=4,
        memory_mb=8192,
        root_gb=40,
        ephemeral_gb=10,
        swap_mb=1024,
        image=ImageSpec(id="ubuntu-22.04", name="ubuntu-22.04", location=""),
        pci_addresses=GPU_ADDRESSES,
    )


@pytest.fixture
def fake_resources() -> HostResources:
    return HostResources(
        hypervisor_hostname="fake-node",
        vcpus=16,
        memory_mb=32768,
        local_gb=500,
        hypervisor_type="FAKE",
        hypervisor_version=1,
        cpu_info={"arch": "x86_64"},
        pci_devices=tuple(PciDevice(a, "10de", "13f1", None) for a in GPU_ADDRESSES),
    )


@pytest.fixture
def golden() -> Callable[[str, str], None]:
    """Compare ``xml`` with ``tests/data/xml/<name>``, or rewrite it when regenerating."""

    def check(name: str, xml: str) -> None:
        path = GOLDEN_DIR / name
        if REGENERATE:
            GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(xml, encoding="utf-8")
        assert path.exists(), f"missing golden {path}; run with NOVAQ_REGENERATE_GOLDEN=1"
        assert xml == path.read_text(encoding="utf-8"), (
            f"{name} differs from its golden file; if the change is intended, "
            "rerun with NOVAQ_REGENERATE_GOLDEN=1 and review the diff"
        )

    return check
