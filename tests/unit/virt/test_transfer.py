"""The signed-URL file service (``virt.transfer``) on a real server thread: signatures
that expire, cannot be moved to another path or method and cannot be forged; 403 for
every request without a valid one, 404 for any name the resolver does not know (so no
path climbs out of its directory); a verified, sparse download that leaves nothing
behind when the data is cut short or does not match its digest."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.server
import io
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.file_servers import listening_late, serving
from virt.libvirt.imagebackend import EPHEMERAL, ROOT
from virt.libvirt.instance_files import DISK_INFO, InstanceFiles
from virt.libvirt.migration import COPIED, pull_disks
from virt.transfer import download
from virt.transfer.download import (
    LocalWriteError,
    TransferChecksumError,
    TransferError,
    TransferUnreachable,
    copy_sparse,
    fetch_to_file,
    shown,
)
from virt.transfer.file_server import DIGEST_HEADER, SignedFileServer, bind
from virt.transfer.names import disk_resolver, image_resolver
from virt.transfer.signing import TransferKey, is_valid, signature, signed_url

KEY = TransferKey.from_text("s3cret", ttl_s=60)
IMAGE = "0b6f4a2c-5d1e-4f3a-9c8b-7e6d5c4b3a21"
UUID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def test_a_signature_is_valid_until_it_expires() -> None:
    url = signed_url(KEY, "http://h:1", "/images/x", now=1000)
    query = urllib.parse.urlsplit(url).query
    assert is_valid(KEY, "GET", "/images/x", query, now=1060)
    assert not is_valid(KEY, "GET", "/images/x", query, now=1061)


@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        ("GET", "/images/y", KEY),  # moved to another path
        ("PUT", "/images/x", KEY),  # another method
        ("GET", "/images/x", TransferKey.from_text("other")),  # another secret
    ],
)
def test_a_signature_holds_only_for_its_method_path_and_secret(
    method: str, path: str, key: TransferKey
) -> None:
    query = urllib.parse.urlsplit(signed_url(KEY, "http://h:1", "/images/x", now=0)).query
    assert not is_valid(key, method, path, query, now=1)


def test_a_tampered_expiry_or_signature_is_refused() -> None:
    expires = 10_000
    good = signature(KEY, "GET", "/p", expires)
    assert is_valid(KEY, "GET", "/p", f"expires={expires}&signature={good}", now=0)
    assert not is_valid(KEY, "GET", "/p", f"expires={expires + 1}&signature={good}", now=0)
    assert not is_valid(KEY, "GET", "/p", f"expires={expires}&signature={good[:-1]}0", now=0)
    assert not is_valid(KEY, "GET", "/p", f"expires={expires}", now=0)
    assert not is_valid(KEY, "GET", "/p", f"expires=-5&signature={good}", now=0)
    assert not is_valid(KEY, "GET", "/p", f"expires={expires}&signature={good}&signature=x", 0)


def test_the_key_never_shows_its_secret() -> None:
    assert "s3cret" not in repr(KEY)
    with pytest.raises(ValueError, match="secret"):
        TransferKey(b"")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    (directory / IMAGE).write_bytes(b"image data " * 1000)
    (tmp_path / "secret.txt").write_text("not served")
    return directory


@pytest.fixture
def server(store: Path) -> Iterator[SignedFileServer]:
    running = bind("127.0.0.1", 0, KEY, image_resolver(store)).serve_in_thread()
    yield running
    running.close()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


def test_the_server_sends_a_known_file_with_its_digest_to_a_signed_request(
    server: SignedFileServer, store: Path
) -> None:
    url = signed_url(KEY, server.url, f"/images/{IMAGE}")
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310
        body, headers = response.read(), response.headers
    assert body == (store / IMAGE).read_bytes()
    assert headers[DIGEST_HEADER] == hashlib.sha256(body).hexdigest()


def test_the_server_refuses_unsigned_expired_and_foreign_requests_with_403(
    server: SignedFileServer,
) -> None:
    path = f"/images/{IMAGE}"
    assert _status(f"{server.url}{path}") == 403
    assert _status(signed_url(KEY, server.url, path, now=0)) == 403  # expired long ago
    other = TransferKey.from_text("not the cloud's")
    assert _status(signed_url(other, server.url, path)) == 403
    moved = signed_url(KEY, server.url, f"/images/{IMAGE}").replace(IMAGE, UUID)
    assert _status(moved) == 403


@pytest.mark.parametrize(
    "path",
    [
        "/images/../secret.txt",
        "/images/%2e%2e/secret.txt",
        "/images/..%2fsecret.txt",
        f"/images/{IMAGE.upper()}",  # only the canonical spelling names the file
        f"/images/{IMAGE}/",
        "/images/",
        "/secret.txt",
        f"/images/{UUID}",  # a well-formed id with no data
    ],
)
def test_a_signed_request_for_an_unknown_name_is_404_whatever_it_tries(
    server: SignedFileServer, path: str
) -> None:
    assert _status(signed_url(KEY, server.url, path)) == 404


def test_the_disk_resolver_serves_only_the_moved_aside_disks(tmp_path: Path) -> None:
    resolve = disk_resolver(tmp_path, ("disk", "disk.info"), "_resize")
    assert resolve(f"/disks/{UUID}/disk") == tmp_path / f"{UUID}_resize" / "disk"
    for refused in (
        f"/disks/{UUID}/disk.swap",
        f"/disks/{UUID}/../{UUID}/disk",
        f"/disks/{UUID}/disk/../../x",
        "/disks/not-a-uuid/disk",
        f"/images/{UUID}",
    ):
        assert resolve(refused) is None, refused


def test_a_download_is_verified_sparse_and_renamed_into_place(
    server: SignedFileServer, store: Path, tmp_path: Path
) -> None:
    data = b"head" + bytes(3 * 1024 * 1024) + b"tail"
    (store / IMAGE).write_bytes(data)
    target = tmp_path / "got"
    assert fetch_to_file(signed_url(KEY, server.url, f"/images/{IMAGE}"), target)
    assert target.read_bytes() == data
    assert target.stat().st_blocks * 512 < len(data) // 2  # the zeros are holes
    assert not fetch_to_file(signed_url(KEY, server.url, f"/images/{UUID}"), tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_a_digest_mismatch_leaves_nothing_behind(
    server: SignedFileServer, store: Path, tmp_path: Path
) -> None:
    url = signed_url(KEY, server.url, f"/images/{IMAGE}")
    path = store / IMAGE
    assert fetch_to_file(url, tmp_path / "first")  # the server now knows its digest
    stat = path.stat()
    path.write_bytes(b"IMAGE DATA " * 1000)  # same size; restamped: the digest is stale
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    target = tmp_path / "got"
    with pytest.raises(TransferChecksumError, match="the sender announced"):
        fetch_to_file(url, target)
    assert list(tmp_path.glob("*got*")) == []


class _CutShort(http.server.BaseHTTPRequestHandler):
    """Announces more data than it sends, then drops the connection."""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.send_header(DIGEST_HEADER, "0" * 64)
        self.end_headers()
        self.wfile.write(b"x" * 1000)
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_a_transfer_cut_short_raises_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with serving(_CutShort) as cutter:
        url = f"http://127.0.0.1:{cutter.server_address[1]}/x?expires=1&signature=abc"
        with pytest.raises(TransferError) as raised:
            fetch_to_file(url, tmp_path / "got")
    assert "signature" not in str(raised.value)  # the URL is shown without its query
    assert list(tmp_path.iterdir()) == []


def test_a_url_is_shown_without_its_signature() -> None:
    assert shown("http://h:1/images/x?expires=1&signature=abc") == "http://h:1/images/x"


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits of 0.1 s, 0.2 s... instead of 1 s, 2 s... (the waiting is not what is tested)."""
    monkeypatch.setattr(download, "RETRY_FIRST_S", 0.1)


class _Failing(http.server.BaseHTTPRequestHandler):
    """Answers every request with the status of its server's ``status``, counting them."""

    def do_GET(self) -> None:  # noqa: N802
        server: Any = self.server
        server.requests += 1
        self.send_error(server.status)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def _failing(status: int) -> Iterator[Any]:
    with serving(_Failing) as failing:
        failing.status, failing.requests = status, 0
        yield failing


def test_a_sender_answering_5xx_is_tried_again_then_unreachable(
    tmp_path: Path, quick_retries: None
) -> None:
    with _failing(503) as failing:
        url = f"http://127.0.0.1:{failing.server_address[1]}/x?expires=1&signature=abc"
        with pytest.raises(TransferUnreachable, match="HTTP 503"):
            fetch_to_file(url, tmp_path / "got", attempts=3)
        assert failing.requests == 3
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_is_not_tried_again(tmp_path: Path, quick_retries: None) -> None:
    with _failing(403) as failing:
        url = f"http://127.0.0.1:{failing.server_address[1]}/x?expires=1&signature=abc"
        with pytest.raises(TransferError, match="HTTP 403") as raised:
            fetch_to_file(url, tmp_path / "got", attempts=3)
        assert failing.requests == 1
    assert not isinstance(raised.value, TransferUnreachable)


class _FullDisk(io.RawIOBase):
    """A local file on a full disk: every write fails with ENOSPC."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_local_write_is_not_the_senders_and_is_not_tried_again(
    server: SignedFileServer, store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (store / IMAGE).write_bytes(b"data" * 1000)
    target = tmp_path / "got"
    real_open = Path.open
    opened: list[Path] = []

    def full_disk(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if path.name == f".{target.name}.part" and "w" in mode:
            opened.append(path)
            return _FullDisk()
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_disk)
    with pytest.raises(TransferError, match="No space left on device") as raised:
        fetch_to_file(signed_url(KEY, server.url, f"/images/{IMAGE}"), target, attempts=3)
    assert not isinstance(raised.value, TransferUnreachable)
    assert len(opened) == 1  # one try
    with pytest.raises(LocalWriteError):
        copy_sparse(io.BytesIO(b"x"), _FullDisk())  # type: ignore[arg-type]


def test_a_pull_waits_for_a_disk_endpoint_that_starts_late(
    tmp_path: Path, quick_retries: None
) -> None:
    """A destination pulling a moved-aside disk while the source's endpoint is not
    listening yet (its worker restarting): refused at first, fetched on a later try."""
    source, dest = tmp_path / "source", tmp_path / "dest"
    aside = source / f"{UUID}_resize"
    aside.mkdir(parents=True)
    (aside / DISK_INFO).write_text('{"disk": "qcow2"}')
    (aside / ROOT).write_bytes(b"root disk" * 1000)
    with listening_late(KEY, disk_resolver(source, COPIED, "_resize")) as endpoint:
        pulled = pull_disks(InstanceFiles(dest), UUID, endpoint, KEY)
    assert pulled == dest / UUID
    assert (pulled / ROOT).read_bytes() == (aside / ROOT).read_bytes()
    assert (pulled / DISK_INFO).read_text() == (aside / DISK_INFO).read_text()
    assert not (pulled / EPHEMERAL).exists()


def test_a_target_that_cannot_be_written_is_not_tried_again(
    server: SignedFileServer, store: Path, tmp_path: Path
) -> None:
    """No directory to write into: the receiver's trouble, one try, no waits."""
    url = signed_url(KEY, server.url, f"/images/{IMAGE}")
    began = time.monotonic()
    with pytest.raises(TransferError, match="writing the local copy") as raised:
        fetch_to_file(url, tmp_path / "missing" / "got", attempts=3)
    assert not isinstance(raised.value, TransferUnreachable)
    assert time.monotonic() - began < download.RETRY_FIRST_S
