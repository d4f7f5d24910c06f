"""The namespaces' own housekeeping: a crashed run's set is removed at the next start, a
live run's is left alone, and ``destroy`` leaves nothing behind."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.multihost import netns

pytestmark = pytest.mark.multihost


@pytest.fixture(autouse=True)
def _root_only() -> None:
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def live_pid() -> Iterator[int]:
    """A process that stays alive for the test (a run still going)."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _ours(tag: str) -> list[str]:
    """Namespaces and links whose names start with ``tag``."""
    namespaces = netns.ip("netns", "list").split()
    links = [line.split(":")[1].strip() for line in netns.ip("-o", "link").splitlines()]
    return [name for name in namespaces + links if name.startswith(f"{tag}-")]


def test_a_crashed_runs_set_is_removed_and_a_live_ones_kept(live_pid: int) -> None:
    crashed = netns.Network.create(f"nq{_dead_pid()}")
    crashed.add("a")
    alive = netns.Network.create(f"nq{live_pid}")
    try:
        alive.add("a")
        assert len(_ours(crashed.tag)) == 3  # namespace, veth, bridge

        removed = netns.remove_stale()

        assert set(_ours(crashed.tag)) == set() and f"{crashed.tag}-a" in removed
        assert len(_ours(alive.tag)) == 3
    finally:
        alive.destroy()
        crashed.destroy()
    assert _ours(alive.tag) == []


def test_machines_talk_over_the_bridge_until_cut(live_pid: int) -> None:
    network = netns.Network.create(f"nq{live_pid}")
    try:
        one, two = network.add("one"), network.add("two")
        assert _connects(one.namespace, two.address)
        network.cut("two")
        assert not _connects(one.namespace, two.address)
        network.heal("two")
        assert _connects(one.namespace, two.address)
    finally:
        network.destroy()
    assert _ours(network.tag) == []


def _connects(namespace: str, address: str) -> bool:
    """Whether a TCP connection from ``namespace`` to ``address``:1 gets an answer (a
    refusal is one: the machine is there); False when nothing comes back in 2 s."""
    probe = (
        "import socket,sys\n"
        "s=socket.socket(); s.settimeout(2)\n"
        f"try: s.connect(('{address}', 1))\n"
        "except ConnectionRefusedError: sys.exit(0)\n"
        "except OSError: sys.exit(1)\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, "python3", "-c", probe], check=False, timeout=30
    )
    return done.returncode == 0
