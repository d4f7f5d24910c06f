"""Scheduling decisions per second, and milliseconds and SQL statements per decision, for
100, 1,000 and 10,000 hosts on SQLite and on PostgreSQL.

    .venv/bin/python bench/scheduler_bench.py [--hosts 100,1000,10000] [--decisions 20]

A decision is what the scheduler does for one boot: load every host state, run the
default filters and weighers, and claim the winner (allocations + generation CAS + the
instance's host) in one transaction. Target: under 50 ms per decision at 10,000 hosts, and
a statement count that does not grow with the number of hosts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STATE = Path(tempfile.mkdtemp(prefix="novaq-bench-"))
for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
    del os.environ[name]
os.environ["NOVAQ_STATE_DIR"] = str(STATE)

from sqlalchemy import create_engine, event, insert, text  # noqa: E402

from compute.sessions import sessions_for  # noqa: E402
from compute.states import TaskState, VmState  # noqa: E402
from models import ComputeNode, Flavor, Instance, Service, utcnow  # noqa: E402
from models.db import dispose_all, get_engine, session_scope  # noqa: E402
from models.migrate import upgrade  # noqa: E402
from novaq.settings import Settings  # noqa: E402
from scheduler.candidates import load_host_states  # noqa: E402
from scheduler.manager import Scheduler  # noqa: E402
from scheduler.request_spec import RequestSpec  # noqa: E402

FLAVOR = {
    "id": "b",
    "name": "bench",
    "vcpus": 1,
    "memory_mb": 512,
    "root_gb": 1,
    "ephemeral_gb": 0,
    "swap": 0,
    "extra_specs": {},
}


def populate(url: str, hosts: int) -> None:
    upgrade(url)
    now = utcnow()
    with session_scope(url) as session:
        session.execute(
            insert(Service),
            [
                {
                    "host": f"h{i:05d}",
                    "binary": "novaq-compute",
                    "topic": f"compute.h{i:05d}",
                    "report_count": 1,
                    "last_seen_up": now,
                    "disabled": False,
                    "forced_down": False,
                    "version": 1,
                    "created_at": now,
                    "deleted": 0,
                }
                for i in range(hosts)
            ],
        )
        session.execute(
            insert(ComputeNode),
            [
                {
                    "uuid": str(uuid.uuid4()),
                    "host": f"h{i:05d}",
                    "hypervisor_hostname": f"h{i:05d}",
                    "hypervisor_type": "QEMU",
                    "hypervisor_version": 8002000,
                    "cpu_info": '{"arch": "x86_64"}',
                    "vcpus": 64,
                    "memory_mb": 262144,
                    "local_gb": 2000,
                    "vcpus_used": 0,
                    "memory_mb_used": 512,
                    "local_gb_used": 0,
                    "free_ram_mb": 262144 - 512 - (i % 97) * 512,
                    "free_disk_gb": 2000,
                    "running_vms": 0,
                    "cpu_allocation_ratio": 4.0,
                    "ram_allocation_ratio": 1.0,
                    "disk_allocation_ratio": 1.0,
                    "reserved_vcpus": 0,
                    "reserved_memory_mb": 512,
                    "reserved_disk_gb": 0,
                    "stats": {},
                    "generation": 0,
                    "created_at": now,
                    "deleted": 0,
                }
                for i in range(hosts)
            ],
        )
        session.add(Flavor(flavorid="b", name="bench", vcpus=1, memory_mb=512, root_gb=1))
    if url.startswith("postgresql"):  # what autovacuum would have done by now
        with get_engine(url).connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")


def new_instance(url: str) -> str:
    instance_uuid = str(uuid.uuid4())
    with session_scope(url) as session:
        session.add(
            Instance(
                uuid=instance_uuid,
                display_name="bench",
                flavor_id=1,
                flavor=FLAVOR,
                image_ref="cirros",
                vm_state=VmState.BUILDING,
                task_state=TaskState.SCHEDULING,
                request_spec={},
                system_metadata={},
            )
        )
    return instance_uuid


class StatementCounter:
    def __init__(self, url: str) -> None:
        self.count = 0
        event.listen(get_engine(url), "before_cursor_execute", self._on_execute)

    def _on_execute(self, *_: object) -> None:
        self.count += 1


def measure(url: str, hosts: int, decisions: int) -> dict[str, float]:
    populate(url, hosts)
    settings = Settings(database_url=url)
    scheduler = Scheduler(settings)
    counter = StatementCounter(url)
    timings, statements, loads = [], [], []
    for _ in range(decisions):
        instance_uuid = new_instance(url)
        spec = RequestSpec(instance_uuid=instance_uuid, flavor=FLAVOR)
        before = counter.count
        started = time.perf_counter()
        selection = scheduler.select_and_claim(sessions_for(url), spec)
        timings.append((time.perf_counter() - started) * 1000)
        statements.append(counter.count - before)
        assert selection is not None
    for _ in range(5):
        started = time.perf_counter()
        with session_scope(url) as session:
            load_host_states(session, settings)
        loads.append((time.perf_counter() - started) * 1000)
    ms = statistics.median(timings)
    return {
        "hosts": hosts,
        "ms": ms,
        "p90": sorted(timings)[int(len(timings) * 0.9) - 1],
        "per_s": 1000 / ms,
        "statements": statistics.median(statements),
        "load_ms": statistics.median(loads),
    }


def pg_url(name: str) -> str:
    admin = create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:5432/test", isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def drop_pg(name: str) -> None:
    admin = create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:5432/test", isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", default="100,1000,10000")
    parser.add_argument("--decisions", type=int, default=20)
    parser.add_argument("--databases", default="sqlite,postgresql")
    args = parser.parse_args()
    print(
        f"{'database':<11}{'hosts':>7}{'ms/decision':>13}{'p90 ms':>9}{'decisions/s':>13}"
        f"{'SQL/decision':>14}{'all-host load ms':>18}"
    )
    for database in args.databases.split(","):
        for hosts in (int(h) for h in args.hosts.split(",")):
            name = f"novaq_bench_{os.getpid()}_{hosts}"
            url = f"sqlite:///{STATE / name}.sqlite" if database == "sqlite" else pg_url(name)
            try:
                r = measure(url, hosts, args.decisions)
            finally:
                dispose_all()
                if database == "postgresql":
                    drop_pg(name)
            print(
                f"{database:<11}{hosts:>7}{r['ms']:>13.1f}{r['p90']:>9.1f}{r['per_s']:>13.1f}"
                f"{r['statements']:>14.0f}{r['load_ms']:>18.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
