"""A launcher group's readiness (``novaq.launcher.readiness``) on real child processes:
what it says of a child that exited and of a server that does not listen yet. The whole
wait (pings, Flower, servers) is tested through ``ProcessGroup.wait_ready`` in
``test_cluster.py``."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from novaq.exceptions import ServiceUnavailable
from novaq.launcher.children import Child
from novaq.launcher.readiness import Readiness, accepts
from novaq.launcher.specs import ProcessSpec
from tests.tcp_proxy import free_port


def _child(tmp_path: Path, name: str, code: str, listens: tuple[str, int] | None = None) -> Child:
    spec = ProcessSpec(name, [sys.executable, "-c", code], dict(os.environ), listens=listens)
    return Child(spec, tmp_path, lambda *_: None, None)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        if child.alive():
            child.kill()
        child.wait(5.0)
        child.close()


def _readiness(children: list[Child]) -> Readiness:
    # (no worker among these children: nothing to ping, no Flower to ask)
    return Readiness("novaq test", "memory://", lambda: children, None)


def test_a_child_that_exited_is_named_with_its_status_and_its_log_tail(
    tmp_path: Path, children: list[Child]
) -> None:
    code = "print('no such setting: [database] connection', flush=True); raise SystemExit(3)"
    children.append(_child(tmp_path, "compute-host1", code))
    children[0].wait(10.0)

    with pytest.raises(ServiceUnavailable) as caught:
        _readiness(children).raise_if_a_child_exited()
    message = str(caught.value)
    assert "compute-host1 exited with status 3" in message
    assert "no such setting: [database] connection" in message


def test_a_server_is_not_ready_until_it_accepts_connections(
    tmp_path: Path, children: list[Child]
) -> None:
    port = free_port()
    late = (
        "import socket, time; time.sleep(1); s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(30)"
    )
    children.append(_child(tmp_path, "image-endpoint", late, listens=("127.0.0.1", port)))
    readiness = _readiness(children)

    assert readiness.not_listening() == {"image-endpoint": ("127.0.0.1", port)}
    deadline = time.monotonic() + 20
    while readiness.not_listening() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert readiness.not_listening() == {}
    assert accepts(("127.0.0.1", port))


def test_a_server_that_never_listens_fails_the_wait_with_its_log_tail(
    tmp_path: Path, children: list[Child]
) -> None:
    port = free_port()
    mute = "print('bound elsewhere', flush=True); import time; time.sleep(30)"
    children.append(_child(tmp_path, "image-endpoint", mute, listens=("127.0.0.1", port)))

    with pytest.raises(ServiceUnavailable) as caught:
        _readiness(children).wait(timeout_s=1.5)
    message = str(caught.value)
    assert f"image-endpoint on 127.0.0.1:{port} accepted no connection within 1.5 s" in message
    assert "bound elsewhere" in message


def test_accepts_is_false_where_nothing_listens() -> None:
    with socket.socket() as unbound:
        unbound.bind(("127.0.0.1", 0))
        port = int(unbound.getsockname()[1])  # bound, not listening: refused
        assert not accepts(("127.0.0.1", port))
