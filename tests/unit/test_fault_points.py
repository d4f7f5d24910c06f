"""The test-only fault points: inert without the environment variable; a paused point
waits for its release in another thread; a raise point raises once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from novaq import fault_points


def test_a_point_does_nothing_unless_armed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fault_points.ENV, raising=False)
    fault_points.arm_raise(tmp_path, "stop:act")
    fault_points.reach("stop:act")  # no directory configured: nothing happens
    monkeypatch.setenv(fault_points.ENV, str(tmp_path))
    fault_points.reach("start:act")  # another point: nothing happens


def test_a_raise_point_raises_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fault_points.ENV, str(tmp_path))
    fault_points.arm_raise(tmp_path, "stop:act")
    with pytest.raises(fault_points.FaultInjected):
        fault_points.reach("stop:act")
    fault_points.reach("stop:act")


def test_a_paused_point_waits_for_its_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fault_points.ENV, str(tmp_path))
    fault_points.arm_pause(tmp_path, "publish:compute.terminate_instance")
    passed = threading.Event()

    def reach() -> None:
        fault_points.reach("publish:compute.terminate_instance")
        passed.set()

    worker = threading.Thread(target=reach)
    worker.start()
    assert fault_points.wait_reached(tmp_path, "publish:compute.terminate_instance", 10) > 0
    assert not passed.wait(0.3)
    fault_points.release(tmp_path, "publish:compute.terminate_instance")
    assert passed.wait(10)
    worker.join()
