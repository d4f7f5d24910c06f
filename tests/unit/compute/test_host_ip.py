"""Each compute node records the address its host reports (Nova's ``host_ip``, from
``[DEFAULT] my_ip``), and the scheduler's host states carry it as an address object."""

from __future__ import annotations

import ipaddress

import pytest
from sqlalchemy import update

from compute.host_ip import host_ip, ip_text, primary_ipv4
from models import ComputeNode
from models.db import session_scope
from novaq.exceptions import ConfigError
from novaq.settings import load_settings
from scheduler.candidates import load_candidates
from tests.factories import make_compute_node, make_settings, node_row
from workflows import api


def test_my_ip_is_the_address_the_node_records_and_the_host_state_carries(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1", settings=make_settings(my_ip="10.1.2.3"))
    assert node_row(db_url, node_id).host_ip == "10.1.2.3"
    with session_scope(db_url) as session:
        [state] = load_candidates(session, make_settings()).hosts
    assert state.host_ip == ipaddress.IPv4Address("10.1.2.3")
    assert state.uuid == node_row(db_url, node_id).uuid


def test_a_node_that_has_not_recorded_its_address_has_none(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    with session_scope(db_url) as session:
        session.execute(update(ComputeNode).values(host_ip=None))
        [state] = load_candidates(session, make_settings()).hosts
    assert state.host_ip is None


def test_an_ipv6_address_is_written_as_nova_writes_it(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1", settings=make_settings(my_ip="::ffff:10.0.0.5"))
    # netaddr's text (inet_ntop), not Python's "::ffff:a00:5".
    assert node_row(db_url, node_id).host_ip == "::ffff:10.0.0.5"
    assert ip_text(ipaddress.ip_address("2001:db8:0::1")) == "2001:db8::1"


def test_simulated_hosts_get_a_loopback_address_each_unless_they_name_one() -> None:
    settings = make_settings(
        hosts=[{"name": "a"}, {"name": "b"}, {"name": "c", "host_ip": "192.0.2.7"}]
    )
    assert host_ip(settings, "a") == ipaddress.IPv4Address("127.0.1.1")
    assert host_ip(settings, "b") == ipaddress.IPv4Address("127.0.1.2")
    assert host_ip(settings, "c") == ipaddress.IPv4Address("192.0.2.7")
    # my_ip, when set, is the address of every host that names none.
    with_my_ip = make_settings(hosts=[{"name": "a"}, {"name": "c", "host_ip": "192.0.2.7"}])
    with_my_ip = with_my_ip.model_copy(update={"my_ip": ipaddress.ip_address("10.0.0.9")})
    assert host_ip(with_my_ip, "a") == ipaddress.IPv4Address("10.0.0.9")
    assert host_ip(with_my_ip, "c") == ipaddress.IPv4Address("192.0.2.7")


def test_without_my_ip_a_host_reports_its_primary_ipv4_address() -> None:
    real = make_settings(hosts=[{"name": "r", "connection_uri": "qemu:///system"}])
    assert host_ip(real, "r") == primary_ipv4() == host_ip(make_settings(), "elsewhere")
    assert isinstance(primary_ipv4(), ipaddress.IPv4Address)


@pytest.mark.parametrize("value", ["10.0.0.300", "host1", ""])
def test_a_my_ip_that_is_no_address_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match="my_ip"):
        load_settings(my_ip=value)


def test_the_hypervisor_views_show_the_host_ip(db_url: str) -> None:
    make_compute_node(db_url, "host1", settings=make_settings(my_ip="10.1.2.3"))
    [listed] = api.list_hosts()
    assert listed["host_ip"] == api.show_hypervisor("host1")["host_ip"] == "10.1.2.3"
