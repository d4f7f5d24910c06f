"""novaq's own heartbeat, timed under load, for ``bench/boot_bench.py``: what
``tasks.bootsteps.Heartbeat.report`` does (``compute.servicegroup.heartbeat`` on a
service's liveness: ``models.db.liveness_write``), every 50 ms in a thread of the bench, on
the database the cluster uses."""

from __future__ import annotations

import threading
import time

from compute import servicegroup

INTERVAL_S = 0.05


class HeartbeatProbe:
    """A context manager: heartbeats every ``interval_s`` while it is entered; their
    latencies (ms) in ``latencies_ms``."""

    def __init__(self, db_url: str, service_id: int, interval_s: float = INTERVAL_S) -> None:
        self.db_url, self.service_id, self.interval_s = db_url, service_id, interval_s
        self.latencies_ms: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-heartbeat", daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                servicegroup.heartbeat(self.db_url, self.service_id)
            except Exception as exc:  # noqa: BLE001 - a failed heartbeat is a finding
                self.errors.append(f"{type(exc).__name__}: {exc}")
            else:
                self.latencies_ms.append((time.perf_counter() - started) * 1000)
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> HeartbeatProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
