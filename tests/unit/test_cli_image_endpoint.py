"""``novaq image-endpoint``, the real command in a process of its own (as ``novaq
controller`` runs it): it serves the image store to signed requests only, and refuses to
start without a secret."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.cli import refused
from virt.transfer.signing import TransferKey, signed_url

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "6c1f0e9d-8b7a-4a65-9d43-2f1e0d9c8b7a"
SECRET = "controller and hosts share this"


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / IMAGE).write_bytes(b"qcow2? no, raw" * 100)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
    env.update(
        NOVAQ_STATE_DIR=str(tmp_path),
        NOVAQ_TRANSFER__SECRET=SECRET,
        PYTHONPATH=str(ROOT),
    )
    argv = [sys.executable, "-m", "novaq.cli", "image-endpoint", "--address", "127.0.0.1"]
    with subprocess.Popen(
        [*argv, "--port", "0"], env=env, stdout=subprocess.PIPE, text=True, cwd=tmp_path
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()  # "image endpoint serving <store> at <url>"
            assert " at http://127.0.0.1:" in line, line
            yield line.rsplit(" at ", 1)[1].strip()
        finally:
            process.terminate()
            process.wait(timeout=60)


def test_the_command_serves_the_store_to_signed_requests_only(
    endpoint: str, tmp_path: Path
) -> None:
    url = signed_url(TransferKey.from_text(SECRET), endpoint, f"/images/{IMAGE}")
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310
        assert response.read() == (tmp_path / "images" / IMAGE).read_bytes()
    with pytest.raises(urllib.error.HTTPError) as refused_request:
        urllib.request.urlopen(f"{endpoint}/images/{IMAGE}", timeout=30)  # noqa: S310
    assert refused_request.value.code == 403
    refused_request.value.close()


def test_the_command_refuses_to_start_without_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOVAQ_TRANSFER__SECRET", raising=False)
    assert "NOVAQ_TRANSFER__SECRET" in refused("image-endpoint", "--port", "0")
