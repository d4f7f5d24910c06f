"""The Python API finds a local ``novaq up`` cluster as the command does (issue 15, defect
1): in the directory of a running cluster, ``from workflows import api`` in a fresh
interpreter sends to the cluster's broker (``.novaq/broker/url``) and reads its config
(``.novaq/cluster.toml``); with no broker configured or found it refuses
(``ServiceUnavailable``) rather than fall back to Celery's default broker, and with a
broker that cannot be reached it refuses before writing anything. A cluster started after
the API was imported is found at the next call.

Each case is a fresh interpreter with no ``NOVAQ_*`` variable, run in a directory laid out
as ``novaq up`` leaves it, because the discovery happens once, when the API first reads
its settings.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: What the fresh interpreter reports: the broker the API publishes to, the settings it
#: uses, and (with ``boot``) what a boot did.
PROBE = textwrap.dedent(
    """
    import json, sys
    from workflows import api
    from novaq.celery_app import app
    from novaq.exceptions import NovaqError
    from novaq.settings import get_settings

    report = {}
    try:
        report["broker"] = app.conf.broker_url
    except NovaqError as exc:
        report["broker_error"] = f"{type(exc).__name__}: {exc}"
    settings = get_settings()
    report["report_interval"] = settings.report_interval
    report["hosts"] = [h.name for h in settings.hosts]
    report["database"] = settings.sqlalchemy_url
    if "boot" in sys.argv:
        from models.migrate import upgrade
        from tests.factories import register_cirros
        upgrade(settings.sqlalchemy_url)
        register_cirros(settings.sqlalchemy_url, settings.image_store_path)
        api.create_flavor("m1", 1, 512, 1)
        try:
            api.boot("vm", "m1", "cirros")
        except NovaqError as exc:
            report["boot_error"] = f"{type(exc).__name__}: {exc}"
        report["servers"] = len(api.list_instances())
    print(json.dumps(report))
    """
)


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _probe(cwd: Path, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _cluster_dir(tmp_path: Path, broker_url: str) -> Path:
    """A directory as ``novaq up`` leaves it while it runs: ``.novaq/broker/url`` and
    ``.novaq/cluster.toml``."""
    state = tmp_path / ".novaq"
    (state / "broker").mkdir(parents=True)
    (state / "broker" / "url").write_text(broker_url + "\n")
    (state / "cluster.toml").write_text('report_interval = 7\n[[hosts]]\nname = "hostx"\n')
    return tmp_path


def test_the_api_uses_the_broker_and_config_of_the_cluster_of_its_directory(
    tmp_path: Path,
) -> None:
    url = f"redis://:secret@127.0.0.1:{_dead_port()}/3"
    report = _probe(_cluster_dir(tmp_path, url))
    assert report["broker"] == url
    assert report["report_interval"] == 7 and report["hosts"] == ["hostx"]
    assert report["database"] == f"sqlite:///{(tmp_path / '.novaq' / 'novaq.sqlite').resolve()}"


def test_an_unreachable_cluster_broker_is_service_unavailable_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    report = _probe(_cluster_dir(tmp_path, f"redis://127.0.0.1:{_dead_port()}/0"), "boot")
    assert report["boot_error"].startswith("ServiceUnavailable: message broker is unavailable")
    assert report["servers"] == 0


def test_without_a_broker_configured_or_found_the_api_refuses_rather_than_guess(
    tmp_path: Path,
) -> None:
    report = _probe(tmp_path, "boot")
    assert "broker" not in report
    for error in (report["broker_error"], report["boot_error"]):
        assert error.startswith("ServiceUnavailable: message broker is unavailable: none is")
        assert "NOVAQ_BROKER_URL is not set" in error
        assert str((tmp_path / ".novaq" / "broker" / "url").resolve()) in error
    assert report["servers"] == 0


LATE = textwrap.dedent(
    """
    import json, os, sys
    from workflows import api
    from novaq.celery_app import app
    from novaq.exceptions import ServiceUnavailable
    from novaq.settings import get_settings

    try:
        app.conf.broker_url
        raise SystemExit("a broker was found before the cluster started")
    except ServiceUnavailable:
        pass
    os.makedirs(".novaq/broker")  # `novaq up` starts in this directory meanwhile
    with open(".novaq/broker/url", "w") as url:
        url.write(sys.argv[1])
    with open(".novaq/cluster.toml", "w") as config:
        config.write("report_interval = 7\\n")
    print(json.dumps({
        "broker": app.conf.broker_url, "report_interval": get_settings().report_interval
    }))
    """
)


def test_a_cluster_started_after_the_api_was_imported_is_found_at_the_next_call(
    tmp_path: Path,
) -> None:
    url = f"redis://127.0.0.1:{_dead_port()}/4"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", LATE, url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"broker": url, "report_interval": 7}
