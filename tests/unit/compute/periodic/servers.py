"""Servers and guests on host1 for the periodic-pass tests: a row as a host step leaves
it, its guest on a real libvirt driver, and the context a pass runs with."""

from __future__ import annotations

import datetime as dt
from typing import Any

from compute.periodic import PeriodicContext
from compute.sessions import sessions_for
from models import utcnow
from tests.factories import make_instance, make_settings
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec


def periodic_ctx(db_url: str, driver: Any, host: str = "host1", **settings: Any) -> PeriodicContext:
    return PeriodicContext(sessions_for(db_url), make_settings(**settings), host, driver)


def host1_server(db_url: str, vm_state: str, power: int = power_state.RUNNING, **state: Any) -> str:
    """A server on host1 in ``vm_state`` with no task in flight (``state`` overrides)."""
    values: dict[str, Any] = dict(
        host="host1",
        node="host1",
        vm_state=vm_state,
        task_state=None,
        power_state=power,
        launched_at=utcnow(),
    )
    values.update(state)
    return make_instance(db_url, **values)


def spawn_guest(driver: ComputeDriver, uuid: str, power: int = power_state.RUNNING) -> None:
    """A small guest for ``uuid``, left running, shut off or paused."""
    driver.spawn(GuestSpec(uuid=uuid, name=f"guest-{uuid[:8]}", vcpus=1, memory_mb=64, root_gb=1))
    if power == power_state.SHUTDOWN:
        driver.power_off(uuid)
    elif power == power_state.PAUSED:
        driver.pause(uuid)


def ago(seconds: int) -> dt.datetime:
    return utcnow() - dt.timedelta(seconds=seconds)
