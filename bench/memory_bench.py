"""Memory of a running cluster over many boots: the resident set (``VmRSS``) of the
scheduler worker's pool children and of each compute worker, sampled after a warm-up and
every ``--checkpoint`` boots, and the growth per 1,000 boots after the warm-up.

    .venv/bin/python bench/memory_bench.py [--boots 1000] [--wave 200] [--hosts 4]
        [--checkpoint 1000] [--warmup 200] [--database sqlite|postgresql]

A real cluster (``novaq.launcher``'s ``Cluster``, as ``novaq up --hosts N``: scheduler,
compute workers, beat, Flower) in a temporary state directory, on the Redis named by
``--redis-url`` (database flushed first; ``embedded``: the launcher's private broker) and
a SQLite file or a PostgreSQL database of its own. Servers are booted one request each
through ``workflows.api``, in waves; each wave is waited for (ACTIVE or ERROR), then
deleted and waited for, so the hosts stay within capacity. Targets (issue 16): a
scheduler pool child flat over 5,000 boots, a compute worker growing by less than 10 MB
per 1,000 servers.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLAVOR = ("bench.tiny", 1, 64, 1)  # name, vCPUs, MiB, GiB: many per host
SETTLED, GONE = ("active", "error"), ("deleted",)
EMBEDDED = "embedded"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(p) for p in text]
    return found


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def workers() -> dict[str, int]:
    """The scheduler's pool children (``sched-child-N``) and each compute worker."""
    found: dict[str, int] = {}
    for pid in descendants(os.getpid()):
        try:
            line = cmdline(pid)
        except OSError:
            continue
        if " worker " not in line:
            continue
        if "-n scheduler@" in line:
            for index, child in enumerate(sorted(children(pid))):
                found[f"sched-child-{index}"] = child
        elif "-n compute@" in line:
            found["compute-" + line.split("-n compute@")[1].split()[0]] = pid
    return found


def sample(pids: dict[str, int]) -> dict[str, float]:
    return {name: rss_kib(pid) / 1024 for name, pid in pids.items()}


def wait_states(db_url: str, uuids: list[str], states: tuple[str, ...], timeout_s: float) -> None:
    from sqlalchemy import func, select

    from models import Instance
    from models.db import session_scope

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope(db_url) as session:
            done = session.scalar(
                select(func.count())
                .select_from(Instance)
                .where(Instance.uuid.in_(uuids), Instance.vm_state.in_(states))
            )
        if done == len(uuids):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{len(uuids) - (done or 0)} servers not {states} after {timeout_s}s")


def run_wave(api: object, db_url: str, wave: int, index: int) -> int:
    """Boot ``wave`` servers, wait, delete them, wait. Returns how many went ERROR."""
    from sqlalchemy import select

    from models import Instance
    from models.db import session_scope

    uuids = []
    for n in range(wave):
        uuids += api.boot(f"mem-{index}-{n}", FLAVOR[0], "cirros")  # type: ignore[attr-defined]
    wait_states(db_url, uuids, SETTLED, 120 + wave)
    with session_scope(db_url) as session:
        errors = session.scalars(
            select(Instance.uuid).where(Instance.uuid.in_(uuids), Instance.vm_state == "error")
        ).all()
    for uuid in uuids:
        api.delete(uuid)  # type: ignore[attr-defined]
    wait_states(db_url, uuids, GONE, 120 + wave)
    return len(errors)


def servers_per_host(db_url: str) -> dict[str, int]:
    """How many servers each compute worker has run so far (deleted ones included)."""
    from sqlalchemy import func, select

    from models import Instance
    from models.db import session_scope

    with session_scope(db_url) as session:
        rows = session.execute(select(Instance.host, func.count()).group_by(Instance.host))
        return {f"compute-{host}": n for host, n in rows if host}


Sample = tuple[int, dict[str, float], dict[str, int]]


def report(samples: list[Sample], warmup_boots: int) -> None:
    names = sorted(samples[0][1])
    print(f"{'boots':>7}  " + "  ".join(f"{n:>17}" for n in names))
    for boots, values, _ in samples:
        print(f"{boots:>7}  " + "  ".join(f"{values.get(n, 0):>14.1f} MB" for n in names))
    base_boots, base, base_servers = next(s for s in samples if s[0] >= warmup_boots)
    last_boots, last, last_servers = samples[-1]
    if last_boots <= base_boots:
        return
    print(f"growth after {base_boots} boots of warm-up, per 1,000 boots (per 1,000 servers")
    print("the worker ran, for a compute worker):")
    for name in names:
        grown = last.get(name, 0) - base.get(name, 0)
        ran = last_servers.get(name, 0) - base_servers.get(name, 0)
        per_servers = f"{grown * 1000 / ran:>8.2f} MB over {ran} servers" if ran else ""
        print(f"  {name:<20}{grown * 1000 / (last_boots - base_boots):>8.2f} MB  {per_servers}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--boots", type=int, default=1000)
    parser.add_argument("--wave", type=int, default=200)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--checkpoint", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/7",
        help=f"its database is flushed first; {EMBEDDED!r}: the launcher's own private broker",
    )
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--pg-name", default="audit_memory_bench")
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="novaq-memory-bench-"))
    atexit.register(shutil.rmtree, state, ignore_errors=True)  # (a run leaves no state dir)
    for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
        del os.environ[name]
    if args.database == "postgresql":
        from pg_databases import pg_url

        db_url = pg_url(args.pg_name)
    else:
        db_url = f"sqlite:///{state}/novaq.sqlite"
    os.environ.update(NOVAQ_STATE_DIR=str(state), NOVAQ_DATABASE_URL=db_url)
    if args.redis_url != EMBEDDED:
        import redis

        os.environ["NOVAQ_BROKER_URL"] = args.redis_url
        redis.Redis.from_url(args.redis_url).flushdb()

    from novaq.launcher.cluster import Cluster
    from novaq.launcher.demo import point_api_at
    from novaq.settings import load_settings

    cluster = Cluster(load_settings(), n_hosts=args.hosts, quiet=True)
    cluster.start()
    try:
        cluster.wait_ready()
        point_api_at(cluster)
        from workflows import api

        api.create_flavor(*FLAVOR)
        pids = workers()
        print(f"cluster up ({state}); sampling {', '.join(sorted(pids))}", flush=True)
        samples: list[Sample] = [(0, sample(pids), servers_per_host(db_url))]
        boots, errors, started = 0, 0, time.monotonic()
        while boots < args.boots:
            wave = min(args.wave, args.boots - boots)
            errors += run_wave(api, db_url, wave, boots)
            boots += wave
            if boots % args.checkpoint == 0 or boots in (args.warmup, args.boots):
                samples.append((boots, sample(pids), servers_per_host(db_url)))
                rss = ", ".join(f"{n} {mb:.1f}" for n, mb in sorted(samples[-1][1].items()))
                print(
                    f"  {boots} boots, {errors} ERROR, {time.monotonic() - started:.0f} s: "
                    f"RSS MB {rss}",
                    flush=True,
                )
        if workers() != pids:
            print("NOTE: a worker or pool child was replaced during the run")
        report(samples, args.warmup)
    finally:
        cluster.stop()
        if args.database == "postgresql":
            from pg_databases import drop_pg

            from models.db import dispose_all

            dispose_all()
            drop_pg(args.pg_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
