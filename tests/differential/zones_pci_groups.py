"""The parts of a differential case that availability zones, PCI passthrough, server groups
and isolated hosts need (hypothesis strategies, as JSON-able dicts), and how novaq's side
reads them. ``tests/differential/cases.py`` merges them into each host and request, and
``tests/differential/nova_verdicts.py`` builds Nova's objects from the same keys:

- host: ``host`` (its name), ``pci_pools`` (free devices: ``[vendor, product, dev_type,
  count]``), ``other_zones`` (the zones of aggregates elsewhere in the cloud, which
  Nova's placement pre-filter sees too);
- request: ``instance_uuid``, ``availability_zone``, ``image_id``, ``image_name``,
  ``group`` (policy, rules, members, hosts), ``options`` (the settings both sides get:
  ``isolated_hosts``, ``isolated_images``, ``restrict_isolated_hosts_to_isolated_images``,
  ``pci_alias``); the flavor's ``pci_passthrough:alias`` extra spec comes from
  ``pci_alias_spec``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import strategies as st

from compute.pci import ALIAS_SPEC, requests_from_extra_specs
from novaq.exceptions import NovaqError
from novaq.settings import Settings
from novaq.settings_groups import FilterSchedulerGroup, PciAliasEntry, PciGroup
from scheduler.candidates import _availability_zone
from scheduler.host_state import AggregateInfo
from scheduler.request_spec import InstanceGroup
from workflows.api.flavors import validate_extra_specs

HOSTNAMES = ["host1", "host2", "host3"]
# "az1,az2" is one zone (Nova refuses only ":" in a zone name), not two.
ZONES = ["az1", "az2", "nova", "az1,az2"]
DEFAULT_ZONE = "nova"
REQUEST_UUID = "00000000-0000-4000-8000-000000000001"
MEMBER_UUIDS = [f"00000000-0000-4000-8000-00000000010{i}" for i in range(4)]
GROUP_UUID = "00000000-0000-4000-8000-0000000000a1"
IMAGE_IDS = [f"00000000-0000-4000-8000-00000000020{i}" for i in range(3)]
IMAGE_NAMES = ["cirros", "ubuntu"]
# The two the filters read, three times as often as the soft ones (which the weighers read).
POLICIES = ["affinity", "anti-affinity"] * 3 + ["soft-affinity", "soft-anti-affinity"]

# [pci] alias, the same on both sides: typed and untyped aliases, a PF and a VF sharing a
# product id (Nova leaves PFs out of a request that does not ask for one), ids in both cases.
PCI_ALIASES: list[dict[str, str]] = [
    {"name": "gpu", "vendor_id": "10de", "product_id": "13f1", "device_type": "type-PCI"},
    {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"},
    {"name": "pf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-PF"},
    {"name": "nic", "vendor_id": "8086", "product_id": "154C"},
    {"name": "fpga", "vendor_id": "1AF4", "product_id": "10f2"},
]
PCI_POOL_KEYS = [
    ("10de", "13f1", "type-PCI"),
    ("8086", "154c", "type-VF"),
    ("8086", "154c", "type-PCI"),
    ("8086", "154c", "type-PF"),
    ("1af4", "10f2", "type-PF"),
    ("1af4", "10f2", "type-VF"),
]
PCI_ALIAS_NAMES = [a["name"] for a in PCI_ALIASES]
# Besides well-formed specs (spaces around names, which Nova strips, and zero counts):
# unknown aliases and the malformed ones Nova refuses.
PCI_BAD_SPECS = ["gpu", "gpu:x", "gpu:-1", ":1", "gpu:1,", "gpu:1:2", "nope:1", "gpu,vf:1"]
# Spellings Nova's extra spec pattern ([^:]+:\d+(?:\s*,\s*[^:]+:\d+)*) decides: spaces
# around a count, leading zeros, digits of other scripts (\d matches "\u0661", not "\u00b2").
PCI_ODD_SPECS = ["gpu: 1", "gpu:1 ", "gpu:01", "gpu:1 , vf:1", "gpu:\u0661", "gpu:\u00b2"]


@st.composite
def host_extras(draw: st.DrawFn) -> dict[str, Any]:
    pools = draw(
        st.lists(
            st.tuples(st.sampled_from(PCI_POOL_KEYS), st.integers(1, 3)),
            max_size=3,
            unique_by=lambda pool: pool[0],
        )
    )
    return {
        "host": draw(st.sampled_from(HOSTNAMES)),
        "pci_pools": [[*key, count] for key, count in pools],
        "other_zones": draw(st.lists(st.sampled_from(ZONES), unique=True, max_size=2)),
    }


def _alias_entry() -> st.SearchStrategy[str]:
    return st.builds(
        lambda name, space, count: f"{space[0]}{name}{space[1]}:{count}",
        st.sampled_from(PCI_ALIAS_NAMES),
        st.sampled_from([("", ""), (" ", ""), ("", " ")]),
        st.sampled_from([0, 1, 1, 2, 3]),
    )


def pci_alias_spec() -> st.SearchStrategy[dict[str, str]]:
    """The flavor's ``pci_passthrough:alias`` extra spec, or none."""
    good = st.lists(_alias_entry(), min_size=1, max_size=3).flatmap(
        lambda entries: st.sampled_from([",", ", "]).map(lambda sep: sep.join(entries))
    )
    value = st.one_of(good, good, good, good, st.sampled_from(PCI_BAD_SPECS + PCI_ODD_SPECS))
    return st.one_of(st.just({}), value.map(lambda v: {ALIAS_SPEC: v}))


@st.composite
def _group(draw: st.DrawFn) -> dict[str, Any]:
    rules = draw(
        st.one_of(st.just({}), st.builds(lambda n: {"max_server_per_host": n}, st.integers(1, 3)))
    )
    return {
        "uuid": GROUP_UUID,
        "policy": draw(st.sampled_from(POLICIES)),
        "rules": rules,
        "members": draw(
            st.lists(st.sampled_from([*MEMBER_UUIDS, REQUEST_UUID]), unique=True, max_size=4)
        ),
        "hosts": draw(st.lists(st.sampled_from(HOSTNAMES), unique=True, max_size=2)),
    }


@st.composite
def _options(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "isolated_hosts": draw(st.lists(st.sampled_from(HOSTNAMES), unique=True, max_size=2)),
        "isolated_images": draw(
            st.lists(
                st.sampled_from([*IMAGE_IDS[:2], *IMAGE_IDS[:2], IMAGE_NAMES[0]]),
                unique=True,
                max_size=2,
            )
        ),
        "restrict_isolated_hosts_to_isolated_images": draw(st.booleans()),
        "pci_alias": PCI_ALIASES,
    }


@st.composite
def request_extras(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "instance_uuid": draw(st.sampled_from([REQUEST_UUID, REQUEST_UUID, MEMBER_UUIDS[0]])),
        "availability_zone": draw(st.one_of(st.none(), *[st.sampled_from(ZONES)] * 2)),
        "image_id": draw(st.sampled_from(["", *IMAGE_IDS])),
        "image_name": draw(st.sampled_from([IMAGE_NAMES[0], *IMAGE_NAMES[1:] * 3])),
        "group": draw(st.one_of(st.none(), *[_group()] * 5)),
        "options": draw(_options()),
    }


# -- novaq's side ---------------------------------------------------------------------------


def novaq_zone(aggregates: tuple[AggregateInfo, ...]) -> str:
    """The host's zone as ``scheduler.candidates`` computes it."""
    return _availability_zone(aggregates, DEFAULT_ZONE)


def novaq_pci_pools(data: dict[str, Any]) -> dict[tuple[str, str, str], int]:
    return {
        (vendor, product, dev_type): count
        for vendor, product, dev_type, count in data.get("pci_pools", [])
    }


def novaq_group(data: dict[str, Any]) -> InstanceGroup | None:
    group = data.get("group")
    return InstanceGroup.load(group) if group else None


def novaq_options_settings(options: dict[str, Any] | None) -> Settings:
    return _settings(json.dumps(options or {}, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _settings(options_json: str) -> Settings:
    options = json.loads(options_json)
    group = FilterSchedulerGroup(
        isolated_hosts=tuple(options.get("isolated_hosts", ())),
        isolated_images=tuple(options.get("isolated_images", ())),
        restrict_isolated_hosts_to_isolated_images=options.get(
            "restrict_isolated_hosts_to_isolated_images", True
        ),
    )
    aliases = tuple(PciAliasEntry(**alias) for alias in options.get("pci_alias", ()))
    return Settings(filter_scheduler=group, pci=PciGroup(alias=aliases))


def novaq_flavor_problem(request: dict[str, Any]) -> str | None:
    """Why novaq's API refuses the flavor's PCI alias spec (None: it does not), with the
    API's own validation."""
    value = request["extra_specs"].get(ALIAS_SPEC)
    if value is None:
        return None
    try:
        validate_extra_specs({ALIAS_SPEC: value}, novaq_options_settings(request.get("options")))
    except NovaqError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def novaq_pci_requests(request: dict[str, Any]) -> tuple[Any, ...]:
    settings = novaq_options_settings(request.get("options"))
    return tuple(requests_from_extra_specs(request["extra_specs"], settings))


def novaq_zone_problem(case: dict[str, Any]) -> str | None:
    """Why novaq's API refuses the requested zone before scheduling (as
    ``workflows.api.aggregates.known_zones``: a zone some aggregate names, or the default),
    for AvailabilityZoneFilter's cases; None if it does not."""
    zone, host = case["request"].get("availability_zone"), case["host"]
    if case["filter"] != "AvailabilityZoneFilter" or not zone:
        return None
    named = {a["availability_zone"] for a in host["aggregates"] if "availability_zone" in a}
    if zone in named | set(host.get("other_zones", [])) | {DEFAULT_ZONE}:
        return None
    return f"availability zone {zone!r} is not available"
