"""A simulated host keeps a guest's lock only while it is used (issue 16: a compute
worker's memory must not grow with every server it ever ran)."""

from __future__ import annotations

import threading
import time
import uuid as uuid_module
from pathlib import Path

from virt.driver import GuestSpec
from virt.host_profile import HostProfile
from virt.simulated import SimulatedHostDriver


def _spec() -> GuestSpec:
    uuid = str(uuid_module.uuid4())
    return GuestSpec(uuid=uuid, name=f"g-{uuid[:8]}", vcpus=1, memory_mb=64, root_gb=0)


def test_no_lock_is_kept_for_guests_that_came_and_went(tmp_path: Path) -> None:
    driver = SimulatedHostDriver(HostProfile("h1"), tmp_path / "h1")
    driver.init_host("h1")
    try:
        for _ in range(5):
            spec = driver.spawn(_spec())
            driver.power_off(spec.uuid)
            driver.destroy(spec.uuid)
            driver.delete_instance_files(spec.uuid)
        assert driver._locks == {}
    finally:
        driver.close()


def test_operations_on_one_guest_still_wait_for_each_other(tmp_path: Path) -> None:
    driver = SimulatedHostDriver(HostProfile("h1"), tmp_path / "h1")
    driver.init_host("h1")
    spec = _spec()
    order: list[str] = []
    try:
        with driver._lock_for(spec.uuid):
            waiter = threading.Thread(target=lambda: (driver.spawn(spec), order.append("spawned")))
            waiter.start()
            time.sleep(0.2)
            order.append("released")
        waiter.join(10)
        assert order == ["released", "spawned"]
        assert driver._locks == {}
    finally:
        driver.close()
