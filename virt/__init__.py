"""The hypervisor layer: the ``ComputeDriver`` contract, its libvirt and fake
implementations, host profiles and the node XML of simulated hosts.

Owns ``get_driver`` and ``get_simulated_driver``, the per-process caches of
drivers: libvirt's test driver keeps its guests in the memory of the process
that opened ``test:///<file>``, so every caller in one worker process must share
one connection. Refuses to know about the database, Celery or scheduling.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from novaq.exceptions import ConfigError

if TYPE_CHECKING:
    from virt.driver import ComputeDriver
    from virt.host_profile import HostProfile
    from virt.libvirt.driver import LibvirtDriver
    from virt.libvirt.imagebackend import DiskOptions
    from virt.libvirt.options import GuestOptions
    from virt.simulated import SimulatedHostDriver

_drivers: dict[tuple[int, str], LibvirtDriver] = {}
_simulated: dict[tuple[int, str], SimulatedHostDriver] = {}
_drivers_lock = threading.Lock()


def get_driver(
    uri: str,
    *,
    fail_spawn: bool = False,
    instances_path: Path | None = None,
    nodename: str | None = None,
    image_cache_subdirectory: str = "_base",
    guest_options: GuestOptions | None = None,
    disk_options: DiskOptions | None = None,
) -> ComputeDriver:
    """The process's one ``LibvirtDriver`` for ``uri`` (a forked child gets its own);
    ``guest_options`` are the ``[libvirt]`` guest choices (``virt.libvirt.options``)."""
    from virt.libvirt.driver import LibvirtDriver

    key = (os.getpid(), uri)
    with _drivers_lock:
        driver = _drivers.get(key)
        if driver is None:
            driver = LibvirtDriver(
                uri,
                fail_spawn=fail_spawn,
                instances_path=instances_path,
                nodename=nodename,
                image_cache_subdirectory=image_cache_subdirectory,
                options=guest_options,
                disk_options=disk_options,
            )
            _drivers[key] = driver
    _check_same_options(driver, fail_spawn, instances_path, guest_options)
    return driver


def _check_same_options(
    driver: LibvirtDriver, fail_spawn: bool, path: Path | None, guest: GuestOptions | None
) -> None:
    other_path = path is not None and driver.instances_path != path
    other_guest = guest is not None and driver.options != guest
    if driver.fail_spawn != fail_spawn or other_path or other_guest:
        raise ConfigError(
            option="libvirt_uri",
            reason=f"a driver for {driver.uri} already exists with other options in this process",
        )


def get_simulated_driver(
    profile: HostProfile,
    state_dir: Path,
    *,
    instances_path: Path | None = None,
    image_cache_subdirectory: str = "_base",
    guest_options: GuestOptions | None = None,
    disk_options: DiskOptions | None = None,
) -> ComputeDriver:
    """The process's one ``SimulatedHostDriver`` for host ``profile.name``.

    Its guests outlive the process in ``state_dir`` (see ``virt.simulated``).
    """
    from virt.simulated import SimulatedHostDriver

    key = (os.getpid(), profile.name)
    with _drivers_lock:
        driver = _simulated.get(key)
        if driver is None:
            driver = SimulatedHostDriver(
                profile,
                state_dir,
                instances_path=instances_path,
                image_cache_subdirectory=image_cache_subdirectory,
                options=guest_options,
                disk_options=disk_options,
            )
            _simulated[key] = driver
    _check_same_host(driver, profile, Path(state_dir), instances_path)
    return driver


def _check_same_host(
    driver: SimulatedHostDriver, profile: HostProfile, state_dir: Path, path: Path | None
) -> None:
    same_path = path is None or driver.instances_path == path
    if driver.profile != profile or driver.state_dir != state_dir or not same_path:
        raise ConfigError(
            option="host profile",
            reason=f"simulated host {profile.name} already exists with other options "
            "in this process",
        )


def clear_drivers() -> None:
    """Close and forget every cached driver of this process (tests, shutdown)."""
    with _drivers_lock:
        pid = os.getpid()
        drivers: list[ComputeDriver] = [d for (p, _uri), d in _drivers.items() if p == pid]
        drivers += [d for (p, _name), d in _simulated.items() if p == pid]
        _drivers.clear()
        _simulated.clear()
    for driver in drivers:
        driver.close()


# Close connections before the interpreter tears libvirt's module down (otherwise
# virConnect.__del__ runs against a half-destroyed module at exit).
atexit.register(clear_drivers)
