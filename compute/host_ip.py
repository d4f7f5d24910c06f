"""The address a compute host reports as its compute node's ``host_ip`` (what Nova's
libvirt driver reports from ``[DEFAULT] my_ip``; SimpleCIDRAffinityFilter and
``capabilities:host_ip`` read it).

In order: the ``[[hosts]]`` table's own ``host_ip``; the ``my_ip`` option; for a simulated
host (a ``[[hosts]]`` table without ``connection_uri``), a loopback address of its own,
``127.0.1.<n>`` for the n-th table (every simulated host runs on this machine, and Linux
answers on all of 127.0.0.0/8, so each has a distinct address that is still this
machine's); otherwise the host's primary IPv4 address, found as Nova's default is.
"""

from __future__ import annotations

import functools
import ipaddress
import socket

from novaq.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The first simulated host is 127.0.1.1, the next 127.0.1.2, ... (127.0.2.0 after 255).
SIMULATED_BASE = ipaddress.IPv4Address("127.0.1.0")
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


def host_ip(settings: Settings, host: str | None = None) -> IPAddress:
    """The address compute host ``host`` (default: this process's ``[DEFAULT] host``)
    reports."""
    declared = settings.simulated_host(host)
    if declared is not None and declared.host_ip is not None:
        return declared.host_ip
    if settings.my_ip is not None:
        return settings.my_ip
    if declared is not None and declared.connection_uri is None:
        position = next(i for i, h in enumerate(settings.hosts, start=1) if h is declared)
        return SIMULATED_BASE + position
    return primary_ipv4()


@functools.cache
def primary_ipv4() -> ipaddress.IPv4Address:
    """The address this machine uses to reach the outside, as oslo's ``get_my_ipv4``
    (Nova's ``my_ip`` default) finds it: the source address of a UDP socket connected to
    a public address (connecting a UDP socket sends nothing); 127.0.0.1 without a route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("8.8.8.8", 80))
            return ipaddress.IPv4Address(probe.getsockname()[0])
    except OSError:
        return LOOPBACK


def ip_text(ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> str | None:
    """An address as Nova writes it (netaddr's text: the C library's ``inet_ntop``, which
    writes an IPv4-mapped IPv6 address ``::ffff:10.0.0.5`` where ``str()`` of Python's
    address writes ``::ffff:a00:5``)."""
    if ip is None:
        return None
    if ip.version == 6:
        return socket.inet_ntop(socket.AF_INET6, ip.packed)
    return str(ip)
