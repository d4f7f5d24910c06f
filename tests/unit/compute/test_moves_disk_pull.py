"""Disks of a move pulled over the network: two simulated hosts (libvirt test:///) with
instance directories of their own and nothing shared, the source's disk endpoint (a real
server thread, ``compute.transfer``) published in its services row. resize_instance only
moves the originals aside on the source; finish_resize pulls them, signed and verified,
from the URL the row holds at that moment (a restarted source is found at its new port);
an interrupted pull leaves nothing half-made and the redelivered step completes; a
corrupt transfer fails its check; confirm and revert keep Nova's semantics."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute import moves, servicegroup, transfer
from models.db import session_scope
from novaq.settings import Settings
from tests.disk_images import qemu_img_info
from tests.factories import make_settings
from tests.unit.compute.conftest import Hosts, simulated_hosts
from tests.unit.compute.test_moves_disks import (
    NEW,
    _ctx,
    _names,
    _request,
    _rewind,
    _server,
    _set,
)
from virt import power_state
from virt.libvirt.imagebackend import DiskOptions
from virt.transfer.download import TransferChecksumError, TransferError
from virt.transfer.file_server import SignedFileServer

GIB = 1024**3
SECRET = "a secret every host of the test cloud shares"


def _settings(host: str) -> Settings:
    return make_settings(host=host, my_ip="127.0.0.1", transfer={"secret": SECRET})


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    """Two hosts, nothing shared, each with the cloud's key."""
    options = DiskOptions(transfer_key=transfer.transfer_key(_settings("src")))
    yield from simulated_hosts(tmp_path, options)


class Endpoints:
    """The source's disk endpoint, (re)started as its worker's start does: serving, then
    published by the registration."""

    def __init__(self, db_url: str, hosts: Hosts) -> None:
        self.db_url, self.hosts = db_url, hosts
        self.running: SignedFileServer | None = None

    def start(self, host: str = "src") -> SignedFileServer:
        settings = _settings(host)
        server = transfer.start_disk_endpoint(settings, self.hosts[host].instances_path)
        assert server is not None
        with session_scope(self.db_url) as session:
            servicegroup.register_service(
                session, host, servicegroup.COMPUTE, f"compute.{host}", settings, server.url
            )
        self.running = server
        return server

    def stop(self) -> None:
        if self.running is not None:
            self.running.close()
            self.running = None


@pytest.fixture
def endpoints(db_url: str, hosts: Hosts) -> Iterator[Endpoints]:
    running = Endpoints(db_url, hosts)
    running.start()
    yield running
    running.stop()


def _moved_aside(db_url: str, hosts: Hosts, tmp_path: Path) -> tuple[str, str]:
    # The source's services row is its worker's (``Endpoints.start``): left alone here.
    uuid = _server(db_url, hosts, tmp_path, ("dst",), src_service=False)
    migration = _request(db_url, uuid, NEW)
    moves.prep_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    moves.resize_instance(_ctx(db_url, migration, hosts["src"], "src"))
    return uuid, migration


def _finish(db_url: str, migration: str, hosts: Hosts) -> None:
    moves.finish_resize(_ctx(db_url, migration, hosts["dst"], "dst"))


def _unchanged_stamp(path: Path, write: Any) -> None:
    """Rewrite ``path`` keeping its size and modification time (a disk gone bad under a
    digest the endpoint already sent)."""
    stat = path.stat()
    write(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_the_destination_pulls_the_disks_and_the_source_only_moves_them_aside(
    db_url: str, hosts: Hosts, endpoints: Endpoints, tmp_path: Path
) -> None:
    uuid, migration = _moved_aside(db_url, hosts, tmp_path)
    src, dst = hosts["src"].instances_path, hosts["dst"].instances_path
    assert _names(src / f"{uuid}_resize") == ["disk", "disk.eph0", "disk.info", "disk.swap"]
    assert not (dst / uuid).exists()  # nothing written into the destination by the source

    _finish(db_url, migration, hosts)

    assert _names(dst / uuid) == ["disk", "disk.eph0", "disk.info", "disk.swap"]
    root, base = qemu_img_info(dst / uuid / "disk", chain=True)
    assert root["virtual-size"] == 2 * GIB
    assert Path(base["filename"]).parent == dst / "_base"  # its own base, fetched there
    assert hosts["dst"].get_info(uuid).power_state == power_state.RUNNING
    assert qemu_img_info(src / f"{uuid}_resize" / "disk")["virtual-size"] == GIB

    _set(db_url, uuid, migration, "confirming", None)
    moves.confirm_resize(_ctx(db_url, migration, hosts["src"], "src"))
    assert not hosts["src"].instance_files_exist(uuid)


def test_revert_drops_the_pulled_copies_and_restores_the_originals_on_the_source(
    db_url: str, hosts: Hosts, endpoints: Endpoints, tmp_path: Path
) -> None:
    uuid, migration = _moved_aside(db_url, hosts, tmp_path)
    _finish(db_url, migration, hosts)

    _set(db_url, uuid, migration, "reverting", "resize_reverting")
    moves.revert_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    moves.finish_revert_resize(_ctx(db_url, migration, hosts["src"], "src"))

    assert not hosts["dst"].instance_files_exist(uuid)
    src = hosts["src"].instances_path
    assert qemu_img_info(src / uuid / "disk")["virtual-size"] == GIB
    info = hosts["src"].get_info(uuid)
    assert (info.power_state, info.vcpus) == (power_state.RUNNING, 1)


def test_a_pull_interrupted_by_the_sources_restart_completes_when_redelivered(
    db_url: str, hosts: Hosts, endpoints: Endpoints, tmp_path: Path
) -> None:
    uuid, migration = _moved_aside(db_url, hosts, tmp_path)
    first = endpoints.running
    assert first is not None
    endpoints.stop()  # the source's worker died: its endpoint answers no more

    with pytest.raises(TransferError):
        _finish(db_url, migration, hosts)
    dst = hosts["dst"].instances_path
    assert not any(p.name.endswith(".part") for p in (dst / uuid).iterdir())
    assert not hosts["dst"].instance_exists(uuid)

    again = endpoints.start()  # restarted: another port, published at registration
    assert again.url != first.url
    _rewind(db_url, uuid, migration, "post-migrating", "resize_finish")
    _finish(db_url, migration, hosts)

    assert hosts["dst"].get_info(uuid).power_state == power_state.RUNNING
    assert qemu_img_info(dst / uuid / "disk")["virtual-size"] == 2 * GIB


def test_a_corrupt_transfer_fails_its_check_and_nothing_is_adopted(
    db_url: str, hosts: Hosts, endpoints: Endpoints, tmp_path: Path
) -> None:
    uuid, migration = _moved_aside(db_url, hosts, tmp_path)
    _finish(db_url, migration, hosts)  # the endpoint has sent (and knows) every digest
    _rewind(db_url, uuid, migration, "post-migrating", "resize_finish")
    hosts["dst"].destroy(uuid)
    hosts["dst"].delete_instance_files(uuid)
    info = hosts["src"].instances_path / f"{uuid}_resize" / "disk.info"
    _unchanged_stamp(info, lambda p: p.write_bytes(p.read_bytes().upper()))

    with pytest.raises(TransferChecksumError, match="sha256"):
        _finish(db_url, migration, hosts)
    assert not hosts["dst"].instance_exists(uuid)
    assert _names(hosts["dst"].instances_path / uuid) == []


def test_without_an_endpoint_the_source_copies_locally_as_on_one_machine(
    db_url: str, hosts: Hosts, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    transfer.warn_local_copies.cache_clear()
    uuid, migration = _moved_aside(db_url, hosts, tmp_path)
    dst = hosts["dst"].instances_path
    assert _names(dst / uuid) == ["disk", "disk.eph0", "disk.info"]
    assert "publishes no disk endpoint" in caplog.text
    _finish(db_url, migration, hosts)
    assert hosts["dst"].get_info(uuid).power_state == power_state.RUNNING


def test_a_restart_without_a_secret_clears_the_published_endpoint(
    db_url: str, endpoints: Endpoints
) -> None:
    with session_scope(db_url) as session:
        assert servicegroup.disk_endpoint_of(session, "src") == endpoints.running.url  # type: ignore[union-attr]
        settings = make_settings(host="src")
        assert transfer.start_disk_endpoint(settings, Path("/nonexistent")) is None
        servicegroup.register_service(session, "src", servicegroup.COMPUTE, "compute.src", settings)
    with session_scope(db_url) as session:
        assert servicegroup.disk_endpoint_of(session, "src") is None
        assert servicegroup.disk_endpoint_of(session, "nowhere") is None
