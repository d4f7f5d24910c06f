"""``update_available_resource`` for one host with N guests, against the floor of listing
those guests with their info, on libvirt's ``test:///default`` driver and on the simulated
host driver, with SQLite and PostgreSQL.

    .venv/bin/python bench/audit_bench.py [--guests 100,1000] [--repeat 15]
        [--databases sqlite,postgresql] [--drivers libvirt,simulated] [--clock wall|cpu]

Every guest is defined and started through the libvirt driver (its own domain XML, its
owner in the metadata) and has its live instance and allocations in the database, so a
pass heals nothing: the steady state. The floor is what listing costs at the least:
``listAllDomains()`` and ``info()`` of every domain on the same connection. The two are
timed interleaved (audit, floor, audit, floor…) and their medians compared. Target: the
audit within 3x the floor at 1,000 guests, and the same number of SQL statements at every
number of guests.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STATE = Path(tempfile.mkdtemp(prefix="novaq-audit-bench-"))
atexit.register(shutil.rmtree, STATE, ignore_errors=True)  # (a run leaves no state dir)
for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
    del os.environ[name]
os.environ["NOVAQ_STATE_DIR"] = str(STATE)

from pg_databases import drop_pg, pg_url  # noqa: E402
from sqlalchemy import event  # noqa: E402

from compute.resource_tracker import update_available_resource  # noqa: E402
from compute.sessions import sessions_for  # noqa: E402
from compute.states import VmState  # noqa: E402
from models import Flavor, Instance  # noqa: E402
from models.db import dispose_all, engines_of, session_scope  # noqa: E402
from models.migrate import upgrade  # noqa: E402
from novaq.settings import Settings  # noqa: E402
from virt.driver import ComputeDriver, GuestSpec  # noqa: E402
from virt.host_profile import HostProfile  # noqa: E402
from virt.libvirt.driver import LibvirtDriver  # noqa: E402
from virt.simulated import SimulatedHostDriver  # noqa: E402

HOST = "bench"
FLAVOR = {
    "id": "b",
    "name": "bench",
    "vcpus": 1,
    "memory_mb": 64,
    "root_gb": 1,
    "ephemeral_gb": 0,
    "swap": 0,
    "extra_specs": {},
}


class StatementCounter:
    def __init__(self, url: str) -> None:
        self.count = 0
        for engine in engines_of(url):  # (SQLite's readers have an engine of their own)
            event.listen(engine, "before_cursor_execute", self._on_execute)

    def _on_execute(self, *_: object) -> None:
        self.count += 1


def define_guests(driver: LibvirtDriver, uuids: list[str]) -> None:
    """Define and start each guest from the driver's own XML (``spawn`` without its disk
    files, which the test driver never opens)."""
    for index, guest_uuid in enumerate(uuids):
        spec = GuestSpec(
            uuid=guest_uuid,
            name=f"bench-{index:05d}-{guest_uuid[:8]}",
            vcpus=1,
            memory_mb=FLAVOR["memory_mb"],  # type: ignore[arg-type]
            root_gb=1,
            flavor_name="bench",
        )
        driver.host.define_domain(driver.guest_xml(spec)).create()


def add_instances(url: str, uuids: list[str]) -> None:
    with session_scope(url) as session:
        flavor = Flavor(flavorid="b", name="bench", vcpus=1, memory_mb=64, root_gb=1)
        session.add(flavor)
        session.flush()
        session.add_all(
            Instance(
                uuid=u,
                display_name="bench",
                flavor_id=flavor.id,
                flavor=FLAVOR,
                image_ref="cirros",
                vcpus=1,
                memory_mb=64,
                root_gb=1,
                vm_state=VmState.ACTIVE,
                task_state=None,
                host=HOST,
                node=HOST,
                request_spec={},
                system_metadata={},
            )
            for u in uuids
        )


@contextmanager
def libvirt_host(guests: int) -> Iterator[tuple[ComputeDriver, LibvirtDriver]]:
    driver = LibvirtDriver("test:///default", instances_path=STATE / "instances", nodename=HOST)
    driver.init_host(HOST)
    yield driver, driver
    # test:///default lives as long as the process: undefine what this run defined.
    for domain in driver.host.list_domains():
        if domain.name().startswith("bench-"):
            domain.destroy()
            domain.undefine()
    driver.close()


@contextmanager
def simulated_host(guests: int) -> Iterator[tuple[ComputeDriver, LibvirtDriver]]:
    profile = HostProfile(HOST, vcpus=4096, memory_mb=4 * 1024 * 1024, local_gb=100_000)
    driver = SimulatedHostDriver(profile, STATE / f"sim-{guests}-{uuid.uuid4().hex[:6]}")
    driver.init_host(HOST)
    yield driver, driver.libvirt_driver
    driver.close()


def floor(driver: LibvirtDriver) -> None:
    for domain in driver.host.get_connection().listAllDomains(0):
        domain.info()


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def timed(work: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    started = clock()
    work()
    return (clock() - started) * 1000


def measure(
    url: str, host: Callable[..., Any], guests: int, repeat: int, clock: Callable[[], float]
) -> dict[str, float]:
    upgrade(url)
    uuids = [str(uuid.uuid4()) for _ in range(guests)]
    settings = Settings(database_url=url)
    sessions = sessions_for(url)
    with host(guests) as (driver, libvirt_driver):
        define_guests(libvirt_driver, uuids)
        add_instances(url, uuids)
        first = update_available_resource(sessions, driver, HOST, settings)
        assert len(first) == guests, f"first pass recreates every allocation: {len(first)}"
        counter = StatementCounter(url)
        audits, floors, statements = [], [], []
        for _ in range(repeat):
            before = counter.count
            audits.append(
                timed(lambda: update_available_resource(sessions, driver, HOST, settings), clock)
            )
            statements.append(counter.count - before)
            floors.append(timed(lambda: floor(libvirt_driver), clock))
        again = update_available_resource(sessions, driver, HOST, settings)
        assert again == [], f"the steady state heals nothing: {again[:3]}"
    audit_ms, floor_ms = statistics.median(audits), statistics.median(floors)
    return {
        "audit_ms": audit_ms,
        "floor_ms": floor_ms,
        "ratio": audit_ms / floor_ms,
        "statements": statistics.median(statements),
    }


HOSTS = {"libvirt": libvirt_host, "simulated": simulated_host}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--guests", default="100,1000")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--drivers", default="libvirt,simulated")
    parser.add_argument("--db-prefix", default="audit_bench")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="cpu: this process's CPU time (steadier on a busy machine; leaves out "
        "PostgreSQL's own work)",
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the first pass's heals, one line per guest
    print(
        f"{'driver':<11}{'database':<12}{'guests':>7}{'audit ms':>10}{'floor ms':>10}"
        f"{'ratio':>8}{'SQL/audit':>11}"
    )
    for driver_name in args.drivers.split(","):
        for database in args.databases.split(","):
            for guests in (int(g) for g in args.guests.split(",")):
                name = f"{args.db_prefix}_{driver_name}_{os.getpid()}_{guests}"
                url = f"sqlite:///{STATE / name}.sqlite" if database == "sqlite" else pg_url(name)
                try:
                    r = measure(url, HOSTS[driver_name], guests, args.repeat, CLOCKS[args.clock])
                finally:
                    dispose_all()
                    if database == "postgresql":
                        drop_pg(name)
                print(
                    f"{driver_name:<11}{database:<12}{guests:>7}{r['audit_ms']:>10.1f}"
                    f"{r['floor_ms']:>10.2f}{r['ratio']:>8.1f}{r['statements']:>11.0f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
