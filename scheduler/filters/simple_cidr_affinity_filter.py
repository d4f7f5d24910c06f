"""SimpleCIDRAffinityFilter: with the ``build_near_host_ip`` hint, only hosts whose
``host_ip`` is in that address's network, ``cidr`` long (a hint too, default ``/24``).

The network is read as Nova's ``netaddr.IPNetwork(build_near_host_ip + cidr)`` reads it:
``cidr`` is ``/`` then a prefix length in decimal (``/24``, ``/64``), a netmask
(``/255.255.255.0``, ``/ffff:ffff::``) or a hostmask (``/0.0.0.255``) of the address's
version; the host bits of the address are ignored. A host of the other IP version is
never in the network.

Where Nova's filter raises (a cidr no network has, such as ``/33`` for an IPv4 address,
or a host that has not recorded its address: the whole request fails in Nova), novaq's
refuses that host; the API refuses such a cidr before anything is written
(``workflows.api.hints``).
"""

from __future__ import annotations

import functools
import ipaddress
import logging

from scheduler.filters.base import BaseFilter
from scheduler.filters.utils import hint_value
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

NEAR_HINT = "build_near_host_ip"
CIDR_HINT = "cidr"
DEFAULT_CIDR = "/24"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class SimpleCIDRAffinityFilter(BaseFilter):
    # The address of a host does not change within a request.
    run_filter_once_per_request = True

    def ignores(self, spec: RequestSpec) -> bool:
        return not hint_value(spec, NEAR_HINT)

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        address = hint_value(spec, NEAR_HINT)
        if not address:
            return True
        cidr = hint_value(spec, CIDR_HINT, DEFAULT_CIDR)
        try:
            network = affinity_network(address, cidr)
        except ValueError as exc:
            LOG.debug("%s: no network %r%r: %s", host.host, address, cidr, exc)
            return False
        host_ip = host.host_ip
        if host_ip is None:
            LOG.debug("%s: the host has not recorded its address (host_ip)", host.host)
            return False
        return host_ip in network


def affinity_network(address: object, cidr: object) -> Network:
    """The network ``address`` + ``cidr`` names (``ValueError`` if none does)."""
    if not isinstance(address, str) or not isinstance(cidr, str):
        raise ValueError(f"build_near_host_ip and cidr must be strings, got {address!r}, {cidr!r}")
    return _network(address, cidr)


@functools.lru_cache(maxsize=256)
def _network(address: str, cidr: str) -> Network:
    ip = ipaddress.ip_address(address)
    if not cidr.startswith("/"):
        raise ValueError(f"cidr {cidr!r} must start with '/'")
    prefix = _prefix_length(ip, cidr[1:])
    return ipaddress.ip_network((ip, prefix), strict=False)


def _prefix_length(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, mask: str) -> int:
    width = ip.max_prefixlen
    if mask.isascii() and mask.isdigit():
        prefix = int(mask)
    else:
        try:
            value = int(type(ip)(mask))
        except ValueError:
            raise ValueError(
                f"cidr /{mask} is neither a prefix length nor an IPv{ip.version} mask"
            ) from None
        prefix = _mask_prefix(value, width)
        if prefix < 0:
            raise ValueError(f"cidr /{mask} is neither a netmask nor a hostmask")
    if not 0 <= prefix <= width:
        raise ValueError(f"prefix length /{prefix} is more than IPv{ip.version}'s {width} bits")
    return prefix


def _mask_prefix(value: int, width: int) -> int:
    """The prefix length of a netmask (``255.255.255.0``) or else of a hostmask
    (``0.0.0.255``), as netaddr reads them: a netmask first; -1 for neither."""
    host_bits = value ^ ((1 << width) - 1)  # a netmask's host bits are all ones
    if host_bits & (host_bits + 1) == 0:
        return width - host_bits.bit_length()
    if value & (value + 1) == 0:  # a hostmask's host bits are all ones
        return width - value.bit_length()
    return -1
