from __future__ import annotations

import uuid as uuid_module

import pytest
from sqlalchemy import select

from compute.claims import ResourceRequest
from compute.pci import PciRequest, allowed, parse_alias_spec, sync_devices, type_matches
from models import PciDevice
from models.db import session_scope
from novaq.exceptions import InvalidFlavor, ResourcesUnavailable
from novaq.settings import PciDeviceSpecEntry
from tests.factories import (
    GPU_ALIAS,
    claim,
    gpu_settings,
    gpus,
    make_compute_node,
    node_row,
    release,
)
from virt.driver import PciDevice as Discovered


def _uuid() -> str:
    return str(uuid_module.uuid4())


def _gpu_node(db_url: str, *addresses: str) -> int:
    settings = gpu_settings()
    node_id = make_compute_node(db_url, "host1", settings=settings)
    with session_scope(db_url) as session:
        sync_devices(session, node_id, gpus(*addresses), settings)
    return node_id


def _statuses(db_url: str) -> dict[str, tuple[str, str | None]]:
    with session_scope(db_url) as session:
        rows = session.scalars(select(PciDevice).where(PciDevice.deleted == 0))
        return {r.address: (r.status, r.instance_uuid) for r in rows}


def _gpu_request(count: int) -> ResourceRequest:
    return ResourceRequest(1, 512, 1, pci=(PciRequest(GPU_ALIAS, count, "10de", "13f1"),))


def test_alias_spec_parses_into_requests() -> None:
    aliases = gpu_settings().pci.alias
    [request] = parse_alias_spec(f"{GPU_ALIAS}:2", aliases)
    assert (request.alias, request.count, request.vendor_id, request.product_id) == (
        GPU_ALIAS,
        2,
        "10de",
        "13f1",
    )


def test_alias_spec_is_read_as_nova_reads_it() -> None:
    # Nova strips the alias name and accepts a count of zero (its extra spec pattern is
    # [^:]+:\d+); a zero count asks for no device, so it makes no request.
    aliases = gpu_settings().pci.alias
    assert [r.count for r in parse_alias_spec(f"{GPU_ALIAS} :1", aliases)] == [1]
    assert [r.alias for r in parse_alias_spec(f" {GPU_ALIAS}: 2", aliases)] == [GPU_ALIAS]
    assert parse_alias_spec(f"{GPU_ALIAS}:0", aliases) == []


def test_an_alias_without_device_type_takes_any_type_but_a_pf() -> None:
    untyped = PciRequest(GPU_ALIAS, 1, "10de", "13f1")
    assert untyped.device_type is None
    for dev_type, served in (("type-PCI", True), ("type-VF", True), ("type-PF", False)):
        assert type_matches(untyped.device_type, dev_type) is served
    assert type_matches("type-PF", "type-PF") and not type_matches("type-VF", "type-PCI")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Unknown:1", "PCI alias 'Unknown' is not defined"),
        (f"{GPU_ALIAS}", "expected NAME:COUNT"),
        (f"{GPU_ALIAS}:two", "count must be a whole number"),
        (f"{GPU_ALIAS}:-1", "count must be a whole number"),
        (f"{GPU_ALIAS}:\u00b2", "count must be a whole number"),  # a digit int() refuses
        (" :1", "expected NAME:COUNT"),
        (f"{GPU_ALIAS}:1,", "expected NAME:COUNT"),
    ],
)
def test_malformed_or_unknown_alias_specs_are_refused(value: str, message: str) -> None:
    with pytest.raises(InvalidFlavor, match=message):
        parse_alias_spec(value, gpu_settings().pci.alias)


def test_device_spec_filters_by_vendor_product_and_address_glob() -> None:
    gpu = Discovered("0000:08:00.0", "10de", "13f1", None)
    nic = Discovered("0000:03:00.0", "8086", "1572", None)
    assert allowed(gpu, [PciDeviceSpecEntry(vendor_id="10de")])
    assert not allowed(nic, [PciDeviceSpecEntry(vendor_id="10de")])
    assert allowed(gpu, [PciDeviceSpecEntry(address="0000:08:*")])
    assert not allowed(gpu, [])


def test_sync_adds_devices_as_available_and_names_them_by_alias(db_url: str) -> None:
    _gpu_node(db_url, "0000:08:00.0", "0000:88:00.0")
    assert _statuses(db_url) == {
        "0000:08:00.0": ("available", None),
        "0000:88:00.0": ("available", None),
    }
    with session_scope(db_url) as session:
        assert {d.alias for d in session.scalars(select(PciDevice))} == {GPU_ALIAS}


def test_sync_removes_vanished_free_devices_but_keeps_allocated_ones(db_url: str) -> None:
    node_id = _gpu_node(db_url, "0000:08:00.0", "0000:88:00.0")
    owner = _uuid()
    claim(db_url, node_id, owner, _gpu_request(1))
    with session_scope(db_url) as session:
        sync_devices(session, node_id, (), gpu_settings())
    assert _statuses(db_url) == {"0000:08:00.0": ("allocated", owner)}


def test_claim_allocates_devices_to_the_consumer_and_release_frees_them(db_url: str) -> None:
    node_id = _gpu_node(db_url, "0000:08:00.0", "0000:88:00.0")
    owner = _uuid()
    claim(db_url, node_id, owner, _gpu_request(2))
    assert _statuses(db_url) == {
        "0000:08:00.0": ("allocated", owner),
        "0000:88:00.0": ("allocated", owner),
    }
    assert release(db_url, owner) == 3 + 2
    assert set(_statuses(db_url).values()) == {("available", None)}


def test_claim_without_enough_free_devices_takes_nothing(db_url: str) -> None:
    node_id = _gpu_node(db_url, "0000:08:00.0", "0000:88:00.0")
    claim(db_url, node_id, _uuid(), _gpu_request(1))
    before = node_row(db_url, node_id)
    loser = _uuid()
    with pytest.raises(ResourcesUnavailable, match="requested 2, 1 free"):
        claim(db_url, node_id, loser, _gpu_request(2))
    after = node_row(db_url, node_id)
    assert (after.memory_mb_used, after.generation) == (before.memory_mb_used, before.generation)
    assert loser not in {owner for _, owner in _statuses(db_url).values()}


def test_claim_with_devices_is_idempotent(db_url: str) -> None:
    node_id = _gpu_node(db_url, "0000:08:00.0", "0000:88:00.0")
    owner = _uuid()
    claim(db_url, node_id, owner, _gpu_request(1))
    claim(db_url, node_id, owner, _gpu_request(1))
    assert sorted(s for s, _ in _statuses(db_url).values()) == ["allocated", "available"]


def test_a_migration_consumer_can_hold_devices_owned_by_its_instance(db_url: str) -> None:
    from compute.claims import claim

    node_id = _gpu_node(db_url, "0000:08:00.0")
    instance, migration = _uuid(), _uuid()
    with session_scope(db_url) as session:
        claim(session, node_id, migration, _gpu_request(1), instance_uuid=instance)
    assert _statuses(db_url) == {"0000:08:00.0": ("allocated", instance)}
    release(db_url, migration)
    assert _statuses(db_url) == {"0000:08:00.0": ("available", None)}


def test_a_claim_serves_typed_requests_before_an_untyped_one(db_url: str) -> None:
    # 08:00.0 is a VF, 88:00.0 a plain PCI device. In the flavor's order the untyped
    # request would take the VF (lowest address) and leave the typed one nothing.
    settings = gpu_settings()
    node_id = make_compute_node(db_url, "host1", settings=settings)
    vf = Discovered("0000:08:00.0", "10de", "13f1", None, "type-VF")
    with session_scope(db_url) as session:
        sync_devices(session, node_id, (vf, *gpus("0000:88:00.0")), settings)
    untyped = PciRequest(GPU_ALIAS, 1, "10de", "13f1")
    typed = PciRequest("vf", 1, "10de", "13f1", "type-VF")
    owner = _uuid()
    claim(db_url, node_id, owner, ResourceRequest(1, 512, 1, pci=(untyped, typed)))
    assert set(_statuses(db_url).values()) == {("allocated", owner)}
