"""A compute host's image fetch from the controller's image endpoint (``[glance]
api_servers``) over HTTP, from a real server thread: the data signed for, verified and
cached; the next endpoint tried when one is down; ``[glance] num_retries`` more rounds
when none answers (an endpoint still starting is waited for), none after a refusal; a
checksum failure final; no endpoints without a secret."""

from __future__ import annotations

import dataclasses
import errno
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from novaq.exceptions import ConfigError
from tests.disk_images import make_raw_image
from tests.file_servers import listening_late
from tests.tcp_proxy import free_port
from virt.driver import ImageSpec
from virt.libvirt import image_fetch
from virt.libvirt.image_fetch import (
    ImageChecksumError,
    ImageEndpointUnreachable,
    ImageFetchError,
    fetch_to_base,
)
from virt.transfer.download import LocalWriteError
from virt.transfer.file_server import SignedFileServer, bind
from virt.transfer.image_source import ImageServers
from virt.transfer.names import image_resolver
from virt.transfer.signing import TransferKey

KEY = TransferKey.from_text("cloud secret")
IMAGE_ID = "3f2e1d0c-9b8a-4765-8432-10fedcba9876"


@pytest.fixture
def image(tmp_path: Path) -> ImageSpec:
    """An image in the controller's store (``<store>/<id>``), its location a path no
    compute host could read across machines."""
    spec = make_raw_image(tmp_path / "made", IMAGE_ID, size=4 * 1024 * 1024)
    store = tmp_path / "store"
    store.mkdir()
    Path(spec.location).rename(store / IMAGE_ID)
    return dataclasses.replace(spec, location="/nonexistent/controller/store/" + IMAGE_ID)


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[SignedFileServer]:
    server = bind("127.0.0.1", 0, KEY, image_resolver(tmp_path / "store")).serve_in_thread()
    yield server
    server.close()


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def quick_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounds 0.2 s apart instead of Nova's second (the waiting is not what is tested)."""
    monkeypatch.setattr(image_fetch, "RETRY_INTERVAL_S", 0.2)


def test_the_image_comes_from_the_endpoint_signed_and_verified(
    image: ImageSpec, endpoint: SignedFileServer, tmp_path: Path
) -> None:
    base = tmp_path / "_base" / "cached"
    base.parent.mkdir()
    fetch_to_base(image, base, force_raw=True, servers=ImageServers((endpoint.url,), KEY))
    assert base.read_bytes() == (tmp_path / "store" / IMAGE_ID).read_bytes()
    assert [p.name for p in base.parent.iterdir()] == ["cached"]


def test_the_next_endpoint_is_tried_when_one_is_down(
    image: ImageSpec, endpoint: SignedFileServer, tmp_path: Path
) -> None:
    base = tmp_path / "cached"
    servers = ImageServers((_dead_url(), endpoint.url), KEY)
    fetch_to_base(image, base, force_raw=True, servers=servers)
    assert base.stat().st_size == 4 * 1024 * 1024


def test_every_endpoint_down_is_an_image_fetch_error_without_the_signature(
    image: ImageSpec, tmp_path: Path
) -> None:
    with pytest.raises(ImageFetchError) as raised:
        fetch_to_base(image, tmp_path / "c", True, ImageServers((_dead_url(),), KEY))
    assert "signature" not in str(raised.value)
    assert list(tmp_path.glob("c*")) == [] and list(tmp_path.glob(".c*")) == []


def test_an_endpoint_that_starts_late_is_waited_for(
    image: ImageSpec, tmp_path: Path, quick_rounds: None
) -> None:
    """The controller's endpoint not listening yet (a cluster starting): the first
    rounds are refused, a later one fetches the image."""
    with listening_late(KEY, image_resolver(tmp_path / "store")) as endpoint:
        servers = ImageServers((endpoint,), KEY, num_retries=5)
        fetch_to_base(image, tmp_path / "cached", True, servers)
    assert (tmp_path / "cached").read_bytes() == (tmp_path / "store" / IMAGE_ID).read_bytes()


def test_the_rounds_end_after_num_retries(
    image: ImageSpec, tmp_path: Path, quick_rounds: None
) -> None:
    calls: list[str] = []
    real = image_fetch._fetch_one

    def counted(located: ImageSpec, base: Path, force_raw: bool) -> None:
        calls.append(located.location)
        real(located, base, force_raw)

    servers = ImageServers((_dead_url(), _dead_url()), KEY, num_retries=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(image_fetch, "_fetch_one", counted)
        with pytest.raises(ImageEndpointUnreachable, match="Connection refused"):
            fetch_to_base(image, tmp_path / "c", True, servers)
    assert len(calls) == 2 * 3  # both endpoints, in 1 + num_retries rounds
    assert list(tmp_path.glob("c*")) == [] and list(tmp_path.glob(".c*")) == []


def test_a_refusal_is_not_tried_again(
    image: ImageSpec, endpoint: SignedFileServer, tmp_path: Path
) -> None:
    """403 (a wrong secret) is an answer, not an endpoint down: one round only (the
    round interval left at its second would make a second round show)."""
    servers = ImageServers((endpoint.url,), TransferKey.from_text("guess"), num_retries=3)
    began = time.monotonic()
    with pytest.raises(ImageFetchError, match="HTTP 403") as raised:
        fetch_to_base(image, tmp_path / "c", True, servers)
    assert not isinstance(raised.value, ImageEndpointUnreachable)
    assert time.monotonic() - began < image_fetch.RETRY_INTERVAL_S


def test_a_checksum_failure_is_final_and_caches_nothing(
    image: ImageSpec, endpoint: SignedFileServer, tmp_path: Path
) -> None:
    wrong = dataclasses.replace(image, checksum="0" * 64)
    servers = ImageServers((endpoint.url, endpoint.url), KEY)
    with pytest.raises(ImageChecksumError):
        fetch_to_base(wrong, tmp_path / "c", True, servers)
    assert not (tmp_path / "c").exists()


def test_a_wrong_secret_is_refused_by_the_endpoint(
    image: ImageSpec, endpoint: SignedFileServer, tmp_path: Path
) -> None:
    servers = ImageServers((endpoint.url,), TransferKey.from_text("guess"))
    with pytest.raises(ImageFetchError, match="403"):
        fetch_to_base(image, tmp_path / "c", True, servers)


def test_endpoints_without_a_secret_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="transfer"):
        ImageServers(("http://controller:9292",), None)


def test_a_failed_local_write_is_not_an_endpoint_down(image: ImageSpec) -> None:
    """A full local disk while the image streams in is no endpoint's fault: not
    ``ImageEndpointUnreachable``, so no other round is made for it."""
    url = dataclasses.replace(image, location="http://127.0.0.1:1/images/x")
    full = LocalWriteError(errno.ENOSPC, "writing the local copy: No space left on device")
    error = image_fetch._unreadable(url, full)
    assert not isinstance(error, ImageEndpointUnreachable)
    assert "No space left" in str(error)
    dropped = image_fetch._unreadable(url, ConnectionResetError("reset by peer"))
    assert isinstance(dropped, ImageEndpointUnreachable)
