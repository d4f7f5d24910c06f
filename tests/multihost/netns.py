"""Machines on one Linux box: network namespaces on a bridge, made and removed with
iproute2's ``ip`` (root only).

A :class:`Network` is a bridge, a private /24 and one namespace per machine, each joined
to the bridge by a veth pair (the machine's end renamed ``eth0``, ``lo`` up). Every name
starts with ``nq<pid of the test process>-``, so a set a crashed run left behind is found
and removed at the next start (:func:`remove_stale`) while a run that is still alive is
left alone. Interface names stay within the kernel's 15 characters.

:func:`inside` moves the calling thread into a namespace for a block (``setns(2)``
through ctypes: Python 3.11 has no ``os.setns``): a socket made there stays in that
namespace after the thread comes back, which is how a process of the root namespace
listens on a machine's address (``tests/multihost/forwarder.py``).

Cutting a machine off (:meth:`Network.cut`) takes its veth off the bridge: its link stays
up and nothing tells either side, as when a switch port dies; :meth:`Network.heal` puts it
back.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

IP = shutil.which("ip") or "/usr/sbin/ip"
_CLONE_NEWNET = 0x40000000
_NAME = re.compile(r"^nq(\d+)-")
#: The kernel's limit on an interface name (IFNAMSIZ - 1).
_IFNAME_MAX = 15


class NetnsUnavailable(RuntimeError):
    """This process cannot make namespaces (not root, or no iproute2)."""


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "the multi-host tier makes network namespaces: it runs as root only"
    if not os.access(IP, os.X_OK):
        return f"the multi-host tier needs iproute2's ip ({IP} not found)"
    if shutil.which("unshare") is None:
        return "the multi-host tier needs util-linux's unshare"
    return None


def ip(*args: str, check: bool = True) -> str:
    done = subprocess.run([IP, *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as handle:
        if libc.setns(handle.fileno(), _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """The calling thread in ``namespace`` for the block, then back where it was.

    NOTE: only the calling thread moves; a thread started inside the block would stay
    in ``namespace`` for good, so make sockets here, start threads after."""
    with open("/proc/thread-self/ns/net", "rb") as home:
        _setns(f"/var/run/netns/{namespace}")
        try:
            yield
        finally:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(home.fileno(), _CLONE_NEWNET) != 0:
                # A thread stranded in a machine's namespace would send the test's own
                # traffic there: nothing after this may run.
                os._exit(70)


def namespace_pids(namespace: str) -> list[int]:
    return [int(pid) for pid in ip("netns", "pids", namespace, check=False).split()]


def kill_namespace(namespace: str, timeout_s: float = 10) -> None:
    """SIGKILL every process in ``namespace`` (a machine losing power) and wait until
    none is left."""
    deadline = time.monotonic() + timeout_s
    while pids := namespace_pids(namespace):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} of {namespace} outlived SIGKILL")
        time.sleep(0.1)


@dataclass(frozen=True)
class Machine:
    """One namespace: its name, its address on the network and its veth's bridge end."""

    name: str
    namespace: str
    address: str
    veth: str


@dataclass
class Network:
    tag: str
    subnet: ipaddress.IPv4Network
    machines: dict[str, Machine] = field(default_factory=dict)

    @classmethod
    def create(cls, tag: str | None = None) -> Network:
        """An empty network: the bridge, up, on a /24 of its own."""
        tag = tag or f"nq{os.getpid()}"
        # 10.213.x.0/24: a private range this machine's own interfaces do not use, picked
        # by pid so two runs side by side get different ones.
        subnet = ipaddress.IPv4Network(f"10.213.{os.getpid() % 250}.0/24")
        network = cls(tag, subnet)
        try:
            ip("link", "add", network.bridge, "type", "bridge")
            ip("link", "set", network.bridge, "up")
        except BaseException:
            network.destroy()
            raise
        return network

    @property
    def bridge(self) -> str:
        return self._ifname("br")

    def _ifname(self, suffix: str) -> str:
        name = f"{self.tag}-{suffix}"
        if len(name) > _IFNAME_MAX:
            raise ValueError(f"interface name {name!r} is longer than {_IFNAME_MAX}")
        return name

    def add(self, name: str) -> Machine:
        """A machine ``name`` on the network: its namespace, its veth (its end ``eth0``
        with the next address of the subnet), ``lo`` up in it."""
        index = len(self.machines) + 1
        namespace = f"{self.tag}-{name}"
        veth, peer = self._ifname(f"v{index}"), self._ifname(f"p{index}")
        address = str(self.subnet.network_address + index)
        # Recorded before it exists, so destroy() removes a half-made machine too.
        machine = Machine(name, namespace, address, veth)
        self.machines[name] = machine
        ip("netns", "add", namespace)
        ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", namespace)
        ip("-n", namespace, "link", "set", peer, "name", "eth0")
        ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        ip("link", "set", veth, "master", self.bridge)
        ip("link", "set", veth, "up")
        return machine

    def cut(self, name: str) -> None:
        """Take ``name`` off the network without a word to anyone: its veth leaves the
        bridge (both links stay up; packets to and from it are lost)."""
        ip("link", "set", self.machines[name].veth, "nomaster")

    def heal(self, name: str) -> None:
        ip("link", "set", self.machines[name].veth, "master", self.bridge)

    def destroy(self) -> None:
        """Every process in the machines killed, the namespaces, veths and bridge gone.
        Never raises for what is already gone: it runs after a failed test too."""
        for machine in self.machines.values():
            with contextlib.suppress(RuntimeError):
                kill_namespace(machine.namespace)
            ip("netns", "del", machine.namespace, check=False)
            ip("link", "del", machine.veth, check=False)  # its peer goes with it
        ip("link", "del", self.bridge, check=False)
        self.machines.clear()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove the namespaces and links of earlier runs whose test process is gone (names
    ``nq<pid>-…``); the names removed."""
    removed: list[str] = []
    namespaces = [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in ip("-o", "link", "show").splitlines()
        if line.count(":") >= 2
    ]
    for name in namespaces:
        found = _NAME.match(name)
        if found and not _pid_alive(int(found.group(1))):
            with contextlib.suppress(RuntimeError):
                kill_namespace(name)
            ip("netns", "del", name, check=False)
            removed.append(name)
    # Veths before bridges: deleting a veth removes its peer too.
    for name in sorted(links, key=lambda n: n.endswith("-br")):
        found = _NAME.match(name)
        if found and not _pid_alive(int(found.group(1))):
            ip("link", "del", name, check=False)
            removed.append(name)
    return removed
