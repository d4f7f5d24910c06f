"""Real-hypervisor tier: a real ``novaq up`` cluster whose two compute hosts, ``hv1`` and
``hv2``, both drive this machine's ``qemu:///system``, booting the test image that
``scripts/build-test-image`` makes (``scripts/hypervisor-up`` starts libvirtd and probes
KVM; ``scripts/test`` runs both first).

A private Redis (own port, password) and SQLite in a temporary state directory, so nothing
is shared with the other tiers. Without libvirtd, root or the image the tier skips; with
``CI=true`` it fails instead. Everything the tier creates (domains, instance directories,
processes) is removed at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.hypervisor.checks import Layout
from tests.hypervisor.cluster import Process, novaq_up, redis_server
from tests.hypervisor.guest import URI, connect, wait_until
from tests.tcp_proxy import free_port

ROOT = Path(__file__).resolve().parents[2]
IMAGE = Path(os.environ.get("NOVAQ_TEST_IMAGE") or ROOT / ".cache/test-image/novaq-test.img")
VIRT_TYPE_FILE = ROOT / ".cache/hypervisor/virt_type"
VIRT_TYPE = VIRT_TYPE_FILE.read_text().strip() if VIRT_TYPE_FILE.is_file() else "qemu"
HOSTS = ("hv1", "hv2")
STATE = Path(tempfile.mkdtemp(prefix="novaq-hv-"))
INSTANCES = STATE / "instances"
_PORT = free_port()
_PASSWORD = secrets.token_urlsafe(16)

for _name in [n for n in os.environ if n.startswith("NOVAQ_")]:
    del os.environ[_name]
os.environ.update(
    NOVAQ_STATE_DIR=str(STATE),
    NOVAQ_BROKER_URL=f"redis://:{_PASSWORD}@127.0.0.1:{_PORT}/0",
    NOVAQ_CONFIG=str(STATE / "novaq.toml"),
    NOVAQ_HOST="hv-client",
    NOVAQ_REPORT_INTERVAL="1",
    NOVAQ_SERVICE_DOWN_TIME="10",
)
SOFT_REBOOT_WAIT_S = 30
# Short waits where a guest that ignores ACPI would otherwise cost Nova's 60 s / 120 s.
BASE_TOML = f"""
shutdown_timeout = 20

[libvirt]
virt_type = "{VIRT_TYPE}"
wait_soft_reboot_seconds = {SOFT_REBOOT_WAIT_S}
instances_path = "{INSTANCES}"

[glance]
store_path = "{STATE / "images"}"

[flower]
port = {free_port()}
"""
HOSTS_TOML = "".join(
    f'\n[[hosts]]\nname = "{h}"\nconnection_uri = "{URI}"\n' for h in HOSTS
)  # fmt: skip
(STATE / "novaq.toml").write_text(BASE_TOML + HOSTS_TOML)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The harness first, then the long scenario, then bad input (whose extra hosts must
    not exist while the scenario schedules)."""
    order = {"test_harness.py": 0, "test_lifecycle.py": 1, "test_bad_input.py": 2}
    items.sort(key=lambda item: order.get(item.path.name, 9))


def _hypervisor_missing() -> str | None:
    if os.geteuid() != 0:
        return "the real-hypervisor tier runs QEMU guests as root"
    if not IMAGE.is_file():
        return f"no test image at {IMAGE} (run scripts/build-test-image)"
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    try:
        libvirt.open(URI).close()
    except libvirt.libvirtError as exc:
        return f"libvirtd does not answer on {URI} ({exc}); run scripts/hypervisor-up"
    return None


@pytest.fixture(scope="session")
def hypervisor() -> str:
    """The libvirt URI, once libvirtd answers (skip locally, fail in CI otherwise)."""
    missing = _hypervisor_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    return URI


@pytest.fixture(scope="session")
def test_image(hypervisor: str) -> Path:
    return IMAGE


@dataclass
class RealCluster:
    """The running cluster and what the tests left in it."""

    state: Path
    env: dict[str, str]
    processes: list[Process] = field(default_factory=list)

    @property
    def instances(self) -> Path:
        return INSTANCES

    def host_dir(self, host: str) -> Path:
        return INSTANCES / host

    def check_alive(self) -> None:
        for process in self.processes:
            assert process.alive(), f"{process.name} exited:\n{process.tail()}"


@pytest.fixture(scope="session")
def cluster(hypervisor: str) -> Iterator[RealCluster]:
    """``novaq up`` with hv1 and hv2 on qemu:///system, ready to boot; torn down after."""
    env = dict(os.environ)
    real = RealCluster(STATE, env)
    try:
        real.processes.append(redis_server(STATE, _PORT, _PASSWORD))
        _wait_redis()
        real.processes.append(novaq_up(STATE, env))
        wait_hosts_up(real, HOSTS)
        yield real
    finally:
        _tear_down(real)


def _wait_redis() -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=_PORT, password=_PASSWORD, socket_timeout=1)
    with client:
        wait_until("the tier's Redis answering", lambda: _ping(client), timeout_s=15)


def _ping(client: object) -> bool:
    import redis

    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except redis.RedisError:
        return False


def wait_hosts_up(real: RealCluster, hosts: tuple[str, ...], timeout_s: float = 90) -> None:
    from sqlalchemy.exc import OperationalError

    from novaq.exceptions import DatabaseUnavailable
    from workflows import api

    def up() -> bool:
        real.check_alive()
        try:
            seen = {h["host"] for h in api.list_hosts() if h["state"] == "up"}
        except (OperationalError, DatabaseUnavailable):  # no schema (or database) yet
            return False
        return set(hosts) <= seen

    wait_until(f"compute hosts {hosts} up", up, timeout_s)


def _tear_down(real: RealCluster) -> None:
    """Delete what the tests left through novaq, stop every process, then remove by hand
    whatever still runs from the state directory (domains, files)."""
    with contextlib.suppress(Exception):
        _delete_servers()
    for process in reversed(real.processes):
        process.stop(timeout_s=40)  # novaq up stops its workers, which stop their guests
    _remove_domains_under(STATE)
    shutil.rmtree(STATE, ignore_errors=True)


def _delete_servers() -> None:
    from workflows import api

    for server in api.list_instances():
        with contextlib.suppress(Exception):
            api.delete(server["uuid"])
    for server in api.list_instances():
        with contextlib.suppress(Exception):
            api.wait(server["uuid"], "DELETED", timeout=30)


def _remove_domains_under(state: Path) -> None:
    """Destroy and undefine every domain whose XML names a file under ``state`` or whose
    name is one of the harness's (``novaq-hv-*``)."""
    flags = (
        libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
        | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
        | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
    )
    try:
        conn = libvirt.open(URI)
    except libvirt.libvirtError:
        return
    with contextlib.closing(conn):
        for domain in conn.listAllDomains(0):
            mine = domain.name().startswith("novaq-hv-") or str(state) in domain.XMLDesc(0)
            if not mine:
                continue
            with contextlib.suppress(libvirt.libvirtError):
                domain.destroy()
            with contextlib.suppress(libvirt.libvirtError):
                domain.undefineFlags(flags)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The state directory goes even when no test started the cluster."""
    shutil.rmtree(STATE, ignore_errors=True)


# -- what the novaq-level tests share -------------------------------------------------------
@pytest.fixture(scope="session")
def layout() -> Layout:
    return Layout(INSTANCES)


@pytest.fixture(scope="session")
def libvirt_ro(hypervisor: str) -> Iterator[libvirt.virConnect]:
    """A read-only connection of the tests' own: libvirt's view, not novaq's."""
    conn = connect()
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def image(cluster: RealCluster, test_image: Path) -> dict[str, Any]:
    """The test image, registered in novaq's image registry."""
    from workflows import api

    return api.create_image("novaq-test", path=str(test_image), disk_format="raw")


@pytest.fixture(scope="session")
def flavors(cluster: RealCluster, libvirt_ro: libvirt.virConnect) -> dict[str, dict[str, Any]]:
    """``small`` and ``big``: the big one has one vCPU more, half as much memory again and
    twice the disk. NOTE: not 2 and 3 vCPUs: as placement's ``max_unit``, no guest may have
    more vCPUs than the host has CPUs (2 on the CI machines)."""
    from workflows import api

    big_vcpus = min(3, libvirt_ro.getInfo()[2])
    assert big_vcpus >= 2, "the tier needs a host of at least 2 CPUs"
    return {
        "small": api.create_flavor("hv.small", vcpus=big_vcpus - 1, memory_mb=256, root_gb=1),
        "big": api.create_flavor("hv.big", vcpus=big_vcpus, memory_mb=384, root_gb=2),
    }
