"""The servers surface on real Redis, PostgreSQL and worker processes for two hosts: a
multi-create into an anti-affinity group named by name (all of max_count placed, or
none), operations and the list by name and filter, metadata set on PostgreSQL."""

from __future__ import annotations

import contextlib

import pytest

from novaq.exceptions import FlavorExists
from tests.integration.checks import wait_schedulable_hosts
from workflows import api

pytestmark = pytest.mark.integration


def test_a_multi_create_into_a_group_by_name_places_all_or_none(
    services: str, two_hosts: object, cleanup: list[str]
) -> None:
    with contextlib.suppress(FlavorExists):
        api.create_flavor("it.surface", 1, 1024, 1)
    api.create_server_group("it-spread", "anti-affinity")
    wait_schedulable_hosts(("host1", "host2"))  # an earlier test's stopped hosts gone down
    # More servers than the session has compute nodes (other tests' hosts included, some
    # still counted up a moment after their test stopped them), anti-affinity: they cannot
    # all be placed, so none is.
    too_many = len(api.list_hosts()) + 1
    failed = api.boot(
        "it-big", "it.surface", "cirros", min_count=2, max_count=too_many, group="it-spread"
    )
    cleanup.extend(failed)
    views = [api.wait(u, "ERROR", timeout=60) for u in failed]
    assert all(v["fault"]["message"].startswith("No valid host was found") for v in views)
    assert all(v["host"] is None for v in views)

    booted = api.boot(
        "it-web",
        "it.surface",
        "cirros",
        min_count=1,
        max_count=2,
        hints={"group": "it-spread"},
        metadata={"role": "web"},
    )
    cleanup.extend(booted)
    views = [api.wait(u, "ACTIVE", timeout=60) for u in booted]
    assert len({v["host"] for v in views}) == 2  # anti-affinity: two hosts
    assert [v["name"] for v in views] == ["it-web-1", "it-web-2"]

    api.stop("it-web-1")
    assert api.wait(booted[0], "SHUTOFF", timeout=60)["metadata"] == {"role": "web"}
    api.update("it-web-2", metadata={"role": None, "tier": "front"}, description="front end")
    listed = api.list_instances(name="^it-web-", status="SHUTOFF")
    assert [s["uuid"] for s in listed] == booted[:1]
    [second] = api.list_instances(name="^it-web-2$")
    assert (second["metadata"], second["description"]) == ({"tier": "front"}, "front end")
    page = api.list_instances(name="^it-", limit=1, marker=failed[-1])
    assert [s["uuid"] for s in page] == booted[:1]
