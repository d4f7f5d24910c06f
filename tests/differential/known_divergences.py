"""Where novaq's verdict differs from Nova 34's on purpose: each case below is one where
Nova's behaviour is judged a bug (or novaq's a harmless extension of it), recognised
exactly, and said in the filter's docstring too. Every other difference fails the
differential tier.
"""

from __future__ import annotations

from typing import Any

from tests.differential.zones_pci_groups import DEFAULT_ZONE

AZ_KEY = "availability_zone"


def known_divergence(case: dict[str, Any], novaq: bool | str, nova: bool | str) -> bool:
    """Whether ``novaq`` and ``nova`` differ in one of the documented ways."""
    check = _CHECKS.get(case["filter"])
    return check is not None and check(case, novaq, nova)


def _default_zone(case: dict[str, Any], novaq: bool | str, nova: bool | str) -> bool:
    """The default zone requested (``default_availability_zone``, "nova"). Nova 34 maps
    a zone to the aggregates that carry it in their metadata, and the default zone is
    carried by none (a host is in it by being in no zone aggregate): so Nova places no
    limit when no aggregate names it (a host in az1 passes) and, when an aggregate does
    name it, refuses the hosts that are in it by default. novaq keeps the zone the API
    shows for each host (the old AvailabilityZoneFilter's reading)."""
    request, host = case["request"], case["host"]
    if request.get("availability_zone") != DEFAULT_ZONE or novaq == nova:
        return False
    host_zones = {a[AZ_KEY] for a in host["aggregates"] if AZ_KEY in a}
    cloud_zones = host_zones | set(host.get("other_zones", []))
    if DEFAULT_ZONE not in cloud_zones:  # Nova: no limit at all
        return nova is True and novaq is False and bool(host_zones)
    # Nova: only members of an aggregate naming the default zone.
    return nova is False and novaq is True and not host_zones


def _isolated_by_name(case: dict[str, Any], novaq: bool | str, nova: bool | str) -> bool:
    """``isolated_images`` lists the image's name, not its id: Nova matches ids only, novaq
    also names (an extension: a list of ids, Nova's configuration, reads the same)."""
    request = case["request"]
    isolated = request.get("options", {}).get("isolated_images", [])
    return (
        isinstance(novaq, bool)
        and isinstance(nova, bool)
        and novaq != nova
        and request.get("image_name") in isolated
        and request.get("image_id") not in isolated
    )


def _pci_refusal(case: dict[str, Any], novaq: bool | str, nova: bool | str) -> bool:
    """Nova refused the host only because of a zero-count request (``alias:0`` asks for no
    device, but Nova's ``PciDeviceStats._apply_request`` fails when no pool matches it)
    or because it applies the requests in the flavor's order (an untyped alias takes the
    VFs a later typed one needs; novaq serves typed requests first)
    (``nova_verdicts._pci_refusal`` checked that Nova passes without them)."""
    return isinstance(nova, str) and nova.startswith("refused:") and novaq is True


def _a_value_matches(case: dict[str, Any], novaq: bool | str, nova: bool | str) -> bool:
    """A host whose aggregates give a key several values, one that matches the spec and
    one a numeric operator cannot read (``gpus`` = ``4`` and ``many`` against ``>= 2``).
    Nova walks the values in set order, which Python's hash seed changes per process: it
    passes the host when the match comes first and raises (failing the request) when the
    unreadable value does. novaq passes the host whatever the order: a value matches."""
    return (
        novaq is True
        and isinstance(nova, str)
        and nova.startswith("raised: ValueError: could not convert string to float")
    )


_CHECKS = {
    "AggregateInstanceExtraSpecsFilter": _a_value_matches,
    "AvailabilityZoneFilter": _default_zone,
    "IsolatedHostsFilter": _isolated_by_name,
    "PciPassthroughFilter": _pci_refusal,
}
