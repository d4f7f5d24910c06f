"""novaq across machines: three compute machines, two scheduler machines and a
controller, each a network namespace (``tests/multihost/conftest.py``)."""

from __future__ import annotations

import re

import pytest

from tests.multihost.checks import audit_clean, boot, delete_all, guests, stuck, wait_all
from tests.multihost.cloud import Cloud
from tests.multihost.conftest import COMPUTE_HOSTS

pytestmark = pytest.mark.multihost

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _instance_dirs(cloud: Cloud, host: str) -> set[str]:
    """The guests' directories on ``host``'s own disk (its instances path)."""
    root = cloud.home(host) / "instances" / host
    return {p.name for p in root.iterdir() if p.is_dir() and _UUID.fullmatch(p.name)}


def test_servers_boot_on_every_compute_machine_each_on_its_own_disk(cloud: Cloud) -> None:
    uuids = boot("spread", 6)
    views = wait_all(uuids, "ACTIVE")
    placed = {view["uuid"]: view["host"] for view in views}

    assert set(placed.values()) == set(COMPUTE_HOSTS)
    for host in COMPUTE_HOSTS:
        mine = {uuid for uuid, where in placed.items() if where == host}
        assert _instance_dirs(cloud, host) == mine
        # The image came over the network into the machine's own cache.
        assert any((cloud.home(host) / "instances" / host / "_base").iterdir())
    # Each machine downloaded it from the controller's endpoint (the fixture's own
    # registration does not count: it reads the file it was given).
    assert cloud.image_endpoint is not None and cloud.image_endpoint.downloads >= len(COMPUTE_HOSTS)
    report = audit_clean(COMPUTE_HOSTS)
    assert guests(report) == {h: list(placed.values()).count(h) for h in COMPUTE_HOSTS}

    delete_all(uuids)

    assert all(_instance_dirs(cloud, host) == set() for host in COMPUTE_HOSTS)
    assert set(guests(audit_clean(COMPUTE_HOSTS)).values()) == {0}
    assert stuck() == []
