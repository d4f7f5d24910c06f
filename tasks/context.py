"""Per-process resources of a worker: settings, database URL, the hypervisor driver and
the scheduler. Built once per process on first use (entry-point code only)."""

from __future__ import annotations

import functools
from pathlib import Path

from novaq.settings import Settings, get_settings
from virt import get_driver, get_simulated_driver
from virt.driver import ComputeDriver
from virt.host_profile import HostProfile, PciDeviceSpec


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
        spawn_failure_rate=declared.spawn_failure_rate,
        spawn_delay_s=declared.spawn_delay_s,
    )


@functools.cache
def driver() -> ComputeDriver:
    """This worker's hypervisor: ``NOVAQ_LIBVIRT_URI`` / ``[libvirt] connection_uri`` or
    this host's ``[[hosts]] connection_uri`` when set (e.g. ``qemu:///system``), else this
    host's simulated ``test:///`` node, whose guests persist in the state directory so they
    outlive a worker restart."""
    s = get_settings()
    state = Path(s.state_dir).resolve()
    instances_path = Path(s.libvirt.instances_path or state / "instances") / s.host
    cache = s.image_cache.subdirectory_name
    declared = s.simulated_host()
    # NOTE: the host's own URI beats the group's: one TOML can mix real and simulated hosts.
    own_uri = declared.connection_uri if declared else None
    explicit = s.libvirt_uri or own_uri or s.libvirt.connection_uri
    if explicit:
        return get_driver(explicit, instances_path=instances_path, image_cache_subdirectory=cache)
    return get_simulated_driver(
        host_profile(s),
        state / "hosts" / s.host,
        instances_path=instances_path,
        image_cache_subdirectory=cache,
    )


@functools.cache
def scheduler():  # type: ignore[no-untyped-def]
    from scheduler.manager import Scheduler

    return Scheduler(get_settings())
