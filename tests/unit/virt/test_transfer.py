"""The signed-URL file service (``virt.transfer``) on a real server thread: signatures
that expire, cannot be moved to another path or method and cannot be forged; 403 for
every request without a valid one, 404 for any name the resolver does not know (so no
path climbs out of its directory); a verified, sparse download that leaves nothing
behind when the data is cut short or does not match its digest."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from virt.transfer.download import TransferChecksumError, TransferError, fetch_to_file, shown
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
    cutter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CutShort)
    thread = threading.Thread(target=cutter.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{cutter.server_address[1]}/x?expires=1&signature=abc"
        with pytest.raises(TransferError) as raised:
            fetch_to_file(url, tmp_path / "got")
    finally:
        cutter.shutdown()
        cutter.server_close()
    assert "signature" not in str(raised.value)  # the URL is shown without its query
    assert list(tmp_path.iterdir()) == []


def test_a_url_is_shown_without_its_signature() -> None:
    assert shown("http://h:1/images/x?expires=1&signature=abc") == "http://h:1/images/x"
