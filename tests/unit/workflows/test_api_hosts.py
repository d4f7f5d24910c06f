"""What runs where (issue 15): ``hypervisor-show`` (resources used and total, PCI
devices and their state, servers), ``hypervisor-servers`` and ``availability-zone-list
--long``, through the API and the ``novaq`` command; an unknown host is one error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import update

from compute.claims import ResourceRequest
from compute.pci import PciRequest, sync_devices
from compute.servicegroup import SCHEDULER, register_service
from models import Instance, Service
from models.db import session_scope
from novaq.cli import base, main
from novaq.exceptions import InvalidInput
from tests.factories import (
    GPU_ALIAS,
    claim,
    gpu_settings,
    gpus,
    make_compute_node,
    make_settings,
)
from tests.unit.cli import novaq_json as _run
from tests.unit.workflows.servers import placed_server
from workflows import api
from workflows.api.hosts import HypervisorNotFound


def _gpu_host_with_a_server(db_url: str) -> tuple[str, str]:
    """host1 with two GPUs, one of them allocated to a server on host1."""
    settings = gpu_settings()
    node_id = make_compute_node(db_url, "host1", settings=settings)
    with session_scope(db_url) as session:
        sync_devices(session, node_id, gpus("0000:81:00.0", "0000:82:00.0"), settings)
    uuid = placed_server(db_url, "active", display_name="gpu-vm")
    request = ResourceRequest(1, 512, 1, pci=(PciRequest(GPU_ALIAS, 1, "10de", "13f1"),))
    claim(db_url, node_id, uuid, request)
    return uuid, str(node_id)


def test_show_gives_resources_devices_and_servers(db_url: str) -> None:
    uuid, _ = _gpu_host_with_a_server(db_url)
    view = api.show_hypervisor("host1")
    assert (view["host"], view["node"], view["state"], view["status"]) == (
        "host1",
        "host1",
        "up",
        "enabled",
    )
    assert (view["vcpus"], view["memory_mb"], view["local_gb"]) == (16, 32768, 500)
    assert view["vcpus_used"] == 1 and view["memory_mb_used"] == 512 + 512  # + reserved
    assert (view["availability_zone"], view["aggregates"]) == ("nova", [])
    assert (view["disabled_reason"], view["forced_down"]) == (None, False)
    assert [(d["address"], d["status"], d["instance_uuid"]) for d in view["pci_devices"]] == [
        ("0000:81:00.0", "allocated", uuid),
        ("0000:82:00.0", "available", None),
    ]
    assert [(s["uuid"], s["name"], s["status"]) for s in view["servers"]] == [
        (uuid, "gpu-vm", "ACTIVE")
    ]
    assert api.show_hypervisor(view["uuid"]) == view  # by node uuid too
    assert _run("hypervisor-show", "host1") == view


def test_show_as_tables(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base.console, "width", 300)
    uuid, _ = _gpu_host_with_a_server(db_url)
    result = CliRunner().invoke(main, ["hypervisor-show", "host1"])
    assert result.exit_code == 0, result.output
    for words in ("Hypervisor host1", "PCI devices", "0000:81:00.0", "allocated", uuid, "gpu-vm"):
        assert words in result.output


def test_servers_lists_the_live_servers_of_a_host(db_url: str) -> None:
    first = placed_server(db_url, "active", display_name="a")
    second = placed_server(db_url, "stopped", display_name="b")
    gone = placed_server(db_url, "active", display_name="c")
    make_compute_node(db_url, "host2")
    with session_scope(db_url) as session:
        session.execute(update(Instance).where(Instance.uuid == gone).values(deleted=1))
    listed = api.list_hypervisor_servers("host1")
    assert [(s["uuid"], s["status"]) for s in listed] == [(first, "ACTIVE"), (second, "SHUTOFF")]
    assert api.list_hypervisor_servers("host2") == []
    assert [s["uuid"] for s in _run("hypervisor-servers", "host1")] == [first, second]


@pytest.mark.parametrize("command", ["hypervisor-show", "hypervisor-servers"])
def test_an_unknown_hypervisor_is_one_error_line(db_url: str, command: str) -> None:
    make_compute_node(db_url, "host1")
    with pytest.raises(HypervisorNotFound, match="host9"):
        api.show_hypervisor("host9")
    with pytest.raises(HypervisorNotFound, match="host9"):
        api.list_hypervisor_servers("host9")
    with pytest.raises(InvalidInput, match="hypervisor must be a non-empty string"):
        api.show_hypervisor(1)
    result = CliRunner().invoke(main, [command, "host9"])
    assert result.exit_code == 1
    assert "ERROR (HypervisorNotFound): No hypervisor matching host9 could be found." in (
        result.output
    )


def _zones_world(db_url: str) -> None:
    """host1 up in zone az1, host2 up in the default zone, host3 disabled in zone az3 (so
    az3 is not available), a scheduler on ctl (internal)."""
    for host in ("host1", "host2", "host3"):
        make_compute_node(db_url, host)
    with session_scope(db_url) as session:
        register_service(session, "ctl", SCHEDULER, "scheduler", make_settings())
    az1 = api.create_aggregate("a1", "az1")
    api.add_host_to_aggregate(az1["id"], "host1")
    az3 = api.create_aggregate("a3", "az3")
    api.add_host_to_aggregate(az3["id"], "host3")
    api.disable_service("host3", reason="broken")
    api.force_down_service("host2")
    host3 = api.show_hypervisor("host3")
    assert (host3["status"], host3["disabled_reason"]) == ("disabled", "broken")


def test_zones_with_their_hosts_and_services(db_url: str) -> None:
    _zones_world(db_url)
    zones = {z["name"]: z for z in api.list_availability_zones()}
    assert {n: z["available"] for n, z in zones.items()} == {
        "az1": True,
        "internal": True,
        "nova": True,
        "az3": False,
    }
    assert zones["az3"]["hosts"] is None
    assert list(zones["az1"]["hosts"]) == ["host1"]
    assert zones["az1"]["hosts"]["host1"]["novaq-compute"]["available"] is True
    assert zones["nova"]["hosts"]["host2"]["novaq-compute"]["available"] is False  # forced down
    assert list(zones["internal"]["hosts"]["ctl"]) == ["novaq-scheduler"]
    assert _run("availability-zone-list") == api.list_availability_zones()


def test_zone_list_command_short_and_long(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base.console, "width", 300)
    _zones_world(db_url)
    short = CliRunner().invoke(main, ["availability-zone-list"])
    assert short.exit_code == 0, short.output
    assert "az3" in short.output and "not available" in short.output
    assert "internal" not in short.output and "host1" not in short.output
    long = CliRunner().invoke(main, ["availability-zone-list", "--long"])
    assert long.exit_code == 0, long.output
    for words in ("internal", "|- ctl", "| |- novaq-scheduler", "|- host1", "enabled :-)"):
        assert words in long.output
    assert "enabled XXX" in long.output  # host2, forced down
    assert "host3" not in long.output  # a disabled service is not listed, as Nova


def test_a_zone_with_no_service_is_not_listed(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    api.create_aggregate("empty", "az-empty")
    with session_scope(db_url) as session:
        session.execute(update(Service).values(disabled=False))
    assert [z["name"] for z in api.list_availability_zones()] == ["nova"]
