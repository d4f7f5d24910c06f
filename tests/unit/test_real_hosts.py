"""A ``[[hosts]]`` table with a ``connection_uri`` declares a real libvirt host: its worker
drives that hypervisor (here a fresh ``test:///`` file standing in for ``qemu:///system``)
and ``novaq up`` passes the URI on to its worker through the cluster's TOML."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from novaq.launcher.plan import write_cluster_config
from novaq.settings import Settings, SimulatedHost
from tasks import context
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.node_xml import test_uri, write_node_xml
from virt.simulated import SimulatedHostDriver


@pytest.fixture
def worker_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Settings]]:
    """Settings the worker's ``context.driver()`` reads (its cache cleared around the test)."""
    chosen: list[Settings] = []
    monkeypatch.setattr(context, "get_settings", lambda: chosen[0])
    context.driver.cache_clear()
    yield chosen
    context.driver.cache_clear()


def test_a_host_with_a_connection_uri_gets_a_libvirt_driver_on_it(
    tmp_path: Path, worker_settings: list[Settings]
) -> None:
    uri = test_uri(write_node_xml(HostProfile(name="real1"), tmp_path / "node"))
    worker_settings.append(
        Settings(
            state_dir=tmp_path,
            host="real1",
            hosts=(SimulatedHost(name="real1", connection_uri=uri), SimulatedHost(name="sim1")),
        )
    )
    driver = context.driver()
    assert isinstance(driver, LibvirtDriver)
    assert driver.uri == uri
    assert driver.instances_path == tmp_path.resolve() / "instances" / "real1"


def test_a_host_without_one_stays_simulated(
    tmp_path: Path, worker_settings: list[Settings]
) -> None:
    worker_settings.append(
        Settings(
            state_dir=tmp_path,
            host="sim9",
            hosts=(
                SimulatedHost(name="real1", connection_uri="qemu:///system"),
                SimulatedHost(name="sim9"),
            ),
        )  # fmt: skip
    )
    assert isinstance(context.driver(), SimulatedHostDriver)


def test_the_cluster_toml_keeps_each_hosts_connection_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        state_dir=tmp_path,
        hosts=(SimulatedHost(name="hv1", connection_uri="qemu:///system"), SimulatedHost(name="s")),
    )
    path, hosts = write_cluster_config(settings, 2)
    assert hosts == ["hv1", "s"]
    monkeypatch.setenv("NOVAQ_CONFIG", str(path))
    loaded = Settings()
    assert [h.connection_uri for h in loaded.hosts] == ["qemu:///system", None]


def test_an_empty_connection_uri_is_refused() -> None:
    with pytest.raises(ValueError, match="connection_uri"):
        SimulatedHost(name="hv1", connection_uri="")


def test_a_machine_that_is_one_compute_host_uses_novas_instances_layout(
    tmp_path: Path, worker_settings: list[Settings]
) -> None:
    """``[libvirt] connection_uri`` with no ``[[hosts]]``: this machine is the host, and its
    guests live in ``<instances_path>/<uuid>`` as Nova's do (no per-host directory)."""
    uri = test_uri(write_node_xml(HostProfile(name="solo"), tmp_path / "node"))
    worker_settings.append(
        Settings(
            state_dir=tmp_path,
            host="solo",
            libvirt={"connection_uri": uri, "instances_path": str(tmp_path / "inst")},
        )
    )
    driver = context.driver()
    assert isinstance(driver, LibvirtDriver)
    assert driver.instances_path == tmp_path / "inst"
