"""Bad input on a real hypervisor: each is a clear novaq error, the server in ERROR with a
fault (or refused before anything is written), and nothing left behind: no allocation, no
instance directory, no domain.

The last two tests add hosts of their own, started by hand as ``novaq up`` would start them:
``hv-noimg`` (its worker's PATH has no qemu-img) and ``hv-down`` (its libvirtd goes away:
its ``connection_uri`` names a relay to libvirtd's socket, cut once the host is up). They
run after the lifecycle scenario (see conftest), so it never lands on them."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
import tomli_w
from sqlalchemy import select

from novaq.exceptions import NovaqError
from tests.hypervisor.checks import Layout
from tests.hypervisor.cluster import Process, SocketRelay, compute_worker, path_without
from tests.hypervisor.conftest import HOSTS, STATE, RealCluster, wait_hosts_up
from tests.hypervisor.guest import URI, domain_state

pytestmark = pytest.mark.hypervisor

NOIMG, DOWN = "hv-noimg", "hv-down"
WAIT_S = 180


def _instance_files(layout: Layout) -> list[Path]:
    """Every instance directory on every host (the ``_base`` caches are not instances)."""
    if not layout.instances.is_dir():
        return []
    return sorted(
        p for p in layout.instances.glob("*/*") if p.is_dir() and not p.name.startswith("_")
    )


def _allocations(consumer: str) -> list[str]:
    from models import Allocation
    from models.db import session_scope
    from workflows.api.common import db_url

    with session_scope(db_url()) as session:
        rows = session.scalars(select(Allocation).where(Allocation.consumer_uuid == consumer))
        return [repr(row) for row in rows]


def _errored_and_clean(
    uuid: str, layout: Layout, conn: libvirt.virConnect, *words: str
) -> dict[str, Any]:
    """The server went to ERROR with a fault naming one of ``words``, and left nothing."""
    from workflows import api

    view = api.wait(uuid, "ERROR", timeout=WAIT_S)
    assert view["fault"] is not None, view
    message = view["fault"]["message"].lower()
    assert any(w in message for w in words), view["fault"]
    assert _allocations(uuid) == []
    assert [p for p in _instance_files(layout) if p.name.startswith(uuid)] == []
    assert domain_state(conn, uuid) == "absent"
    return view


def test_an_unknown_image_is_refused_before_anything_is_written(
    cluster: RealCluster, flavors: dict[str, Any], layout: Layout
) -> None:
    from workflows import api

    before = (api.list_instances(), _instance_files(layout))
    with pytest.raises(NovaqError, match="no-such-image"):
        api.boot("hv-unknown", flavors["small"]["name"], "no-such-image")
    assert (api.list_instances(), _instance_files(layout)) == before


def test_an_image_larger_than_the_flavors_disk_is_refused(
    cluster: RealCluster, flavors: dict[str, Any], layout: Layout, tmp_path: Path
) -> None:
    from workflows import api

    big = tmp_path / "big.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(big), "2G"], check=True)
    api.create_image("hv-2g", path=str(big), disk_format="qcow2")
    before = (api.list_instances(), _instance_files(layout))
    with pytest.raises(NovaqError):  # Nova: FlavorDiskSmallerThanImage
        api.boot("hv-too-big", flavors["small"]["name"], "hv-2g")  # root_gb = 1
    assert (api.list_instances(), _instance_files(layout)) == before


def test_an_image_that_fails_its_checksum_errors_the_server_and_leaves_nothing(
    cluster: RealCluster,
    flavors: dict[str, Any],
    layout: Layout,
    libvirt_ro: libvirt.virConnect,
    test_image: Path,
) -> None:
    from workflows import api

    created = api.create_image("hv-corrupt", path=str(test_image), disk_format="raw")
    stored = _store_file(api.show_image(created["id"]))
    with stored.open("r+b") as handle:  # one byte flipped in the boot sector
        first = handle.read(1)
        handle.seek(0)
        handle.write(bytes([first[0] ^ 0xFF]))
    [uuid] = api.boot("hv-corrupt", flavors["small"]["name"], "hv-corrupt")
    _errored_and_clean(uuid, layout, libvirt_ro, "checksum")
    for host in HOSTS:
        assert not layout.base(host, created["id"]).exists(), "a base that failed its checksum"


def _store_file(image: dict[str, Any]) -> Path:
    """The image's data file in the image store (``[glance] store_path``)."""
    location = image.get("location") or image.get("file") or ""
    if location and not location.startswith(("http://", "https://")):
        return Path(location.removeprefix("file://"))
    [found] = [p for p in (STATE / "images").rglob(f"*{image['id']}*") if p.is_file()]
    return found


@pytest.fixture(scope="module")
def extra_hosts(cluster: RealCluster) -> Iterator[SocketRelay]:
    """hv-noimg and hv-down up, each with a TOML of its own (the cluster's plus its host)."""
    relay = SocketRelay(STATE / "libvirt-relay.sock").start()
    config = tomllib.loads((STATE / "cluster.toml").read_text())
    config["hosts"] = [
        {"name": NOIMG, "connection_uri": URI},
        {"name": DOWN, "connection_uri": f"{URI}?socket={relay.path}"},
    ]
    extra = STATE / "extra-hosts.toml"
    extra.write_text(tomli_w.dumps(config))
    env = {**cluster.env, "NOVAQ_CONFIG": str(extra)}
    noimg_path = path_without("qemu-img", STATE / "bin-without-qemu-img")
    assert shutil.which("qemu-img", path=noimg_path) is None
    workers: list[Process] = [
        compute_worker(STATE, NOIMG, {**env, "PATH": noimg_path}),
        compute_worker(STATE, DOWN, env),
    ]
    cluster.processes += workers
    wait_hosts_up(cluster, (NOIMG, DOWN))
    yield relay
    relay.cut()
    for worker in workers:
        worker.stop()


def test_a_host_without_qemu_img_errors_the_server_with_a_clear_fault(
    extra_hosts: SocketRelay,
    image: dict[str, Any],
    flavors: dict[str, Any],
    layout: Layout,
    libvirt_ro: libvirt.virConnect,
) -> None:
    from workflows import api

    [uuid] = api.boot(
        "hv-noimg", flavors["small"]["name"], image["name"], availability_zone=f"nova:{NOIMG}"
    )
    _errored_and_clean(uuid, layout, libvirt_ro, "qemu-img")


def test_a_host_whose_libvirtd_is_down_errors_the_server_and_leaves_nothing(
    extra_hosts: SocketRelay,
    image: dict[str, Any],
    flavors: dict[str, Any],
    layout: Layout,
    libvirt_ro: libvirt.virConnect,
) -> None:
    from workflows import api

    extra_hosts.cut()  # libvirtd is gone for hv-down (and only for it)
    [uuid] = api.boot(
        "hv-down", flavors["small"]["name"], image["name"], availability_zone=f"nova:{DOWN}"
    )
    _errored_and_clean(uuid, layout, libvirt_ro, "libvirt", "hypervisor", "connect")
