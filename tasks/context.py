"""Per-process resources of a worker: settings, database URL, the hypervisor driver and
the scheduler. Built once per process on first use (entry-point code only)."""

from __future__ import annotations

import functools
from pathlib import Path

from compute import transfer
from compute.sessions import Sessions, sessions_for
from compute.steps import StepContext
from novaq.settings import Settings, get_settings
from scheduler.manager import Scheduler
from virt import get_driver, get_simulated_driver
from virt.driver import ComputeDriver
from virt.host_profile import HostProfile, PciDeviceSpec
from virt.libvirt.imagebackend import DiskOptions
from virt.libvirt.options import GuestOptions


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
    cache = s.image_cache.subdirectory_name
    disks = disk_options(s)
    guest = guest_options(s)
    declared = s.simulated_host()
    # NOTE: the host's own URI beats the group's: one TOML can mix real and simulated hosts.
    own_uri = declared.connection_uri if declared else None
    explicit = s.libvirt_uri or own_uri or s.libvirt.connection_uri
    instances_path = Path(s.libvirt.instances_path or state / "instances")
    if declared is not None or not explicit:
        # Several hosts on one machine ([[hosts]] tables, simulated or real) each keep
        # their own directory; a machine that is one compute host uses Nova's layout,
        # <instances_path>/<uuid>.
        instances_path = instances_path / s.host
    if explicit:
        return get_driver(
            explicit,
            instances_path=instances_path,
            image_cache_subdirectory=cache,
            guest_options=guest,
            disk_options=disks,
        )
    return get_simulated_driver(
        host_profile(s),
        state / "hosts" / s.host,
        instances_path=instances_path,
        image_cache_subdirectory=cache,
        guest_options=guest,
        disk_options=disks,
    )


def guest_options(s: Settings) -> GuestOptions:
    """The ``[libvirt]`` / ``[compute]`` guest choices the libvirt driver applies."""
    return GuestOptions(
        virt_type=s.libvirt.virt_type,
        cpu_mode=s.libvirt.cpu_mode,
        cpu_models=s.libvirt.cpu_models,
        wait_soft_reboot_seconds=s.libvirt.wait_soft_reboot_seconds,
        mem_stats_period_seconds=s.libvirt.mem_stats_period_seconds,
        shutdown_retry_interval_s=s.compute.shutdown_retry_interval,
    )


def disk_options(s: Settings) -> DiskOptions:
    """``[DEFAULT] use_cow_images`` and ``force_raw_images`` for the image backend, and
    where images and moved disks come from (``compute.transfer``)."""
    return DiskOptions(
        use_cow_images=s.use_cow_images,
        force_raw_images=s.force_raw_images,
        image_servers=transfer.image_servers(s),
        transfer_key=transfer.transfer_key(s),
    )


@functools.cache
def scheduler() -> Scheduler:
    return Scheduler(get_settings())


def sessions() -> Sessions:
    """This process's transactions (``models.db.session_scope`` on the configured URL)."""
    return sessions_for(get_settings().sqlalchemy_url)


def step_context(request_id: str, host: str) -> StepContext:
    """What a host step of this worker runs with: its transactions, its hypervisor, its
    host, the request and ``[DEFAULT] shutdown_timeout``."""
    return StepContext(sessions(), driver(), host, request_id, get_settings().shutdown_timeout)
