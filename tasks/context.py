"""Per-process resources of a worker: settings, database URL, the hypervisor driver and
the scheduler. Built once per process on first use (entry-point code only)."""

from __future__ import annotations

import functools
from pathlib import Path

from novaq.settings import Settings, get_settings
from virt import get_driver
from virt.driver import ComputeDriver
from virt.host_profile import HostProfile, PciDeviceSpec
from virt.node_xml import test_uri, write_node_xml


def settings() -> Settings:
    return get_settings()


def db_url() -> str:
    return get_settings().sqlalchemy_url


def host_profile(s: Settings) -> HostProfile:
    """The simulated host this worker plays, from ``[[hosts]]`` (default profile if none)."""
    declared = s.simulated_host()
    if declared is None:
        return HostProfile(name=s.host)
    return HostProfile(
        name=declared.name,
        vcpus=declared.vcpus,
        memory_mb=declared.memory_mb,
        local_gb=declared.local_gb,
        pci_devices=tuple(
            PciDeviceSpec(
                address=d.address.lower(),
                vendor_id=d.vendor_id.lower(),
                product_id=d.product_id.lower(),
                numa_node=d.numa_node,
            )
            for d in declared.pci_devices
        ),
        fail_spawn=declared.fail_spawn,
    )


def libvirt_uri(s: Settings) -> str:
    """``NOVAQ_LIBVIRT_URI`` / ``[libvirt] connection_uri`` if set, else this host's
    simulated ``test:///`` node, generated from its profile into the state directory."""
    explicit = s.libvirt_uri or s.libvirt.connection_uri
    if explicit:
        return explicit
    directory = Path(s.state_dir).resolve() / "hosts"
    return test_uri(write_node_xml(host_profile(s), directory))


@functools.cache
def driver() -> ComputeDriver:
    s = get_settings()
    profile = host_profile(s)
    instances_path = Path(s.libvirt.instances_path or Path(s.state_dir).resolve() / "instances")
    simulated = not (s.libvirt_uri or s.libvirt.connection_uri)
    return get_driver(
        libvirt_uri(s),
        fail_spawn=profile.fail_spawn,
        instances_path=instances_path / s.host,
        nodename=s.host if simulated else None,
    )


@functools.cache
def scheduler():  # type: ignore[no-untyped-def]
    from scheduler.manager import Scheduler

    return Scheduler(get_settings())
