"""What the API tests that run workflows through the in-thread worker share: a periodic
pass's context on host1, an ACTIVE server, and a delete that leaves no guest behind."""

from __future__ import annotations

import contextlib
from typing import Any

from compute.periodic import PeriodicContext
from novaq.exceptions import FlavorExists
from novaq.settings import get_settings
from tasks import context
from workflows import api


def periodic_context(db_url: str, **settings: Any) -> PeriodicContext:
    """As the periodic task builds it on host1, with ``settings`` overriding (shrunk)."""
    shrunk = get_settings().model_copy(update=settings)
    return PeriodicContext(db_url, shrunk, "host1", context.driver(), api)


def boot_active(name: str = "vm", flavor: str = "m1") -> str:
    with contextlib.suppress(FlavorExists):
        api.create_flavor(flavor, 1, 512, 1)
    [uuid] = api.boot(name, flavor, "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    return uuid


def delete_and_wait(uuid: str) -> None:
    """Leave no guest behind: the next test's instance-00000001 must be free."""
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)
