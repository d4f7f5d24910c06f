"""The notifications' binding watch when it cannot watch (``compute.notification_bindings``;
with a real Redis: tests/integration/test_notification_bindings.py): every message goes
through kombu as before, and the watch does not try again at every publish."""

from __future__ import annotations

import socket

import pytest

from compute.notification_bindings import BindingWatch


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_broker_is_unknown_and_not_tried_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watch = BindingWatch(
        {"host": "127.0.0.1", "port": _closed_port(), "db": 0},
        "notifications",
        "_kombu.binding.notifications",
        "\x06\x16",
    )
    tries: list[int] = []
    read = watch._read

    def counted() -> None:
        tries.append(1)
        read()

    monkeypatch.setattr(watch, "_read", counted)
    assert watch.routes("versioned_notifications.info") is None
    assert watch.routes("versioned_notifications.info") is None
    assert tries == [1]

    watch._retry_at = 0.0  # the pause is over
    assert watch.routes("versioned_notifications.error") is None
    assert tries == [1, 1]
