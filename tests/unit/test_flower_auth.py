"""A real Flower, started as the launcher starts it, refuses unauthenticated requests.

Flower 2.2 cannot switch its task-running API off (``read_only`` guards only worker
control), so basic auth in front of it is the control: without credentials,
``POST /api/task/async-apply/<task>`` must get 401, on loopback too.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from novaq.launcher.flower_guard import flower_command
from novaq.launcher.plan import CELERY_ARGV
from novaq.settings import Settings
from tests.tcp_proxy import free_port

REPO = Path(__file__).resolve().parents[2]


def _status(url: str, *, method: str = "GET", auth: str | None = None) -> int:
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture
def flower(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Flower on loopback with nothing configured: its URL and the run's credential."""
    port = free_port()
    settings = Settings(state_dir=tmp_path / "state", flower={"port": port})
    argv, extra_env = flower_command(settings, CELERY_ARGV)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOVAQ_", "FLOWER_"))}
    env.update(
        extra_env,
        PYTHONPATH=str(REPO),
        NOVAQ_STATE_DIR=str(tmp_path / "state"),
        # Nothing listens there: Flower serves HTTP without a broker.
        NOVAQ_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0",
    )
    log = (tmp_path / "flower.log").open("wb")
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "flower.log").read_text()
            try:
                if _status(f"{url}/healthcheck") == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()
            time.sleep(0.2)
        yield url, extra_env["FLOWER_BASIC_AUTH"]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def test_flower_refuses_to_run_a_task_without_the_operator_credential(
    flower: tuple[str, str],
) -> None:
    url, credential = flower
    task = f"{url}/api/task/async-apply/compute.build_and_run_instance"
    assert _status(task, method="POST") == 401
    assert _status(task, method="POST", auth="operator:wrong") == 401
    for path in ("/api/task/send-task/x", "/api/task/revoke/x", "/api/worker/shutdown/x"):
        assert _status(f"{url}{path}", method="POST") == 401, path
    for path in ("/", "/api/workers", "/api/tasks", "/api/task/types"):
        assert _status(f"{url}{path}") == 401, path
    # The operator gets in.
    assert _status(f"{url}/api/task/types", auth=credential) == 200
    # Open by Flower's design (README): they run nothing.
    assert _status(f"{url}/healthcheck") == 200
    assert _status(f"{url}/metrics") == 200
