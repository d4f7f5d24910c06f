"""What compute hands the driver for a power-off or a reboot: Nova's
``_get_power_off_values`` (``shutdown_timeout``, the image's ``os_shutdown_timeout``,
``force_stop`` unclean) and the guest a hard reboot defines again."""

from __future__ import annotations

from typing import Any

import pytest

from compute import lifecycle, shelve
from compute.instance_state import get_instance
from compute.power import power_off_timeout
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import utcnow
from models.db import session_scope
from tests.factories import host_resources, make_instance
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec
from virt.fake import FakeDriver

REQUEST = "req-power"


def _ctx(db_url: str, driver: ComputeDriver, host: str = "host1") -> StepContext:
    return StepContext(sessions_for(db_url), driver, host, REQUEST)


def _server(
    db_url: str, driver: FakeDriver, task_state: str, sysmeta: dict[str, str] | None = None
) -> str:
    uuid = make_instance(
        db_url,
        host="host1",
        node="host1",
        vm_state="active",
        task_state=task_state,
        power_state=power_state.RUNNING,
        launched_at=utcnow(),
        request_id=REQUEST,
        system_metadata=sysmeta or {},
    )
    driver.spawn(GuestSpec(uuid=uuid, name="instance-00000001", vcpus=1, memory_mb=512, root_gb=1))
    return uuid


@pytest.mark.parametrize(
    ("sysmeta", "clean", "expected"),
    [
        ({}, True, 60),
        ({"image_os_shutdown_timeout": "5"}, True, 5),
        ({"image_os_shutdown_timeout": "0"}, True, 0),
        ({"image_os_shutdown_timeout": "soon"}, True, 60),
        ({"image_os_shutdown_timeout": "-3"}, True, 60),
        ({"image_os_shutdown_timeout": "5"}, False, 0),
    ],
)
def test_power_off_timeout_as_nova(sysmeta: dict[str, Any], clean: bool, expected: int) -> None:
    assert power_off_timeout(sysmeta, 60, clean) == expected


def test_stop_waits_shutdown_timeout_for_a_clean_shutdown(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "powering-off")

    lifecycle.stop_instance(
        StepContext(sessions_for(db_url), driver, "host1", REQUEST, shutdown_timeout_s=42), uuid
    )

    assert driver.power_off_timeouts == [(uuid, 42)]


def test_the_images_os_shutdown_timeout_overrides_it(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "powering-off", {"image_os_shutdown_timeout": "7"})

    lifecycle.stop_instance(
        StepContext(sessions_for(db_url), driver, "host1", REQUEST, shutdown_timeout_s=42), uuid
    )

    assert driver.power_off_timeouts == [(uuid, 7)]


def test_force_stop_destroys_at_once(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "powering-off", {"image_os_shutdown_timeout": "7"})

    lifecycle.stop_instance(_ctx(db_url, driver), uuid, clean_shutdown=False)

    assert driver.power_off_timeouts == [(uuid, 0)]


def test_shelve_and_rescue_power_off_cleanly(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    shelved = _server(db_url, driver, "shelving")
    rescued = _server(db_url, driver, "rescuing", {"image_os_shutdown_timeout": "3"})

    shelve.shelve_instance(
        StepContext(sessions_for(db_url), driver, "host1", REQUEST, shutdown_timeout_s=9), shelved
    )
    lifecycle.rescue_instance(
        StepContext(sessions_for(db_url), driver, "host1", REQUEST, shutdown_timeout_s=9), rescued
    )

    assert (shelved, 9) in driver.power_off_timeouts
    assert (rescued, 3) in driver.power_off_timeouts


@pytest.mark.parametrize("hard", [False, True])
def test_reboot_hands_the_driver_the_instances_guest(db_url: str, hard: bool) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "rebooting_hard" if hard else "rebooting")

    lifecycle.reboot_instance(_ctx(db_url, driver), uuid, hard=hard)

    assert driver.reboots == [(uuid, hard)]
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        expected_name = f"instance-{instance.id:08x}"
    if hard:  # the redefined guest is the instance's, not the one first spawned
        assert driver.get_info(uuid).name == expected_name
