from __future__ import annotations

from typing import Any

import pytest

from compute import notifications
from compute.sessions import sessions_for
from novaq.exceptions import ConfigError
from novaq.settings import load_settings
from tests.factories import make_instance


def test_notified_wraps_a_step_in_start_and_end(db_url: str, sent: list) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    with notifications.notified(sessions_for(db_url), "pause", uuid, "host1", "req-1"):
        pass
    assert [m["event_type"] for m, _ in sent] == ["instance.pause.start", "instance.pause.end"]
    message, priority = sent[0]
    assert priority == "INFO" and message["publisher_id"] == "nova-compute:host1"
    data = message["payload"]["nova_object.data"]
    assert (data["uuid"], data["state"], data["request_id"]) == (uuid, "building", "req-1")


def test_a_failed_step_emits_error_at_error_priority(db_url: str, sent: list) -> None:
    uuid = make_instance(db_url)
    with (
        pytest.raises(RuntimeError),
        notifications.notified(sessions_for(db_url), "reboot", uuid, "h"),
    ):
        raise RuntimeError("boom")
    assert [(m["event_type"], p) for m, p in sent][-1] == ("instance.reboot.error", "ERROR")


def test_nothing_is_sent_without_a_publisher_and_a_broken_one_breaks_nothing(db_url: str) -> None:
    uuid = make_instance(db_url)
    notifications.install(None)
    notifications.emit(sessions_for(db_url), "instance.create.start", uuid, "h")

    def broken(message: dict[str, Any], priority: str) -> None:
        raise ConnectionError("broker down")

    notifications.install(broken)
    try:
        notifications.emit(
            sessions_for(db_url), "instance.create.start", uuid, "h"
        )  # logged, not raised
    finally:
        notifications.install(None)


def test_notification_format_is_checked_and_unversioned_turns_them_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().notifications.versioned
    monkeypatch.setenv("NOVAQ_NOTIFICATIONS__NOTIFICATION_FORMAT", "unversioned")
    assert not load_settings().notifications.versioned
    monkeypatch.setenv("NOVAQ_NOTIFICATIONS__NOTIFICATION_FORMAT", "loud")
    with pytest.raises(ConfigError, match="notification_format"):
        load_settings()
