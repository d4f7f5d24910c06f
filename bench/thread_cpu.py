"""The workers' CPU per thread, novaq against the bare app, for the part of
``bench/boot_bench.py``'s "outside tasks" figure that a process-wide total cannot explain.

    .venv/bin/python bench/thread_cpu.py [--hosts 4] [--boots 200] [--warmup 8] \\
        [--repetitions 1] [--idle 5] [--pyspy-dir DIR --pyspy-s 30]

Both clusters of ``boot_bench`` (``bench/boot_clusters.py``, SQLite for novaq) are
started and warmed up; then, per repetition, an idle window (both sides at rest,
``--idle`` seconds), novaq's boots, novaq's deletes, the bare app's boots and deletes.
Around each window (tight: from the first call to the moment every server is done, plus
0.5 s for the tails and the counters' dumps, the same on both sides) every thread of
every worker process (prefork children too) is read from ``/proc/<pid>/task/<tid>/stat``
(utime + stime). Threads are named by a ``py-spy dump`` taken after the warm-up (Python
3.11 leaves ``comm`` as ``python``). The task CPU of each process (``bench.sql_counts``'s
files) is subtracted per process, so the table shows, per op, where the CPU outside
tasks goes. ``--pyspy-dir``: ``py-spy record`` (raw, GIL, threads) of the compute worker
of host1 and of the scheduler's parent and children on each side, started after the
warm-up.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import sql_counts  # noqa: E402

if TYPE_CHECKING:
    from bench.boot_runs import BareSide, NovaqSide

#: py-spy (not a project dependency: `pip install py-spy` into a venv of your own), from
#: ``$PY_SPY`` or the PATH. Without it threads are shown by id and ``--pyspy-dir`` is refused.
PYSPY = os.environ.get("PY_SPY") or shutil.which("py-spy") or ""
TICK = os.sysconf("SC_CLK_TCK")
Snap = dict[tuple[int, int], int]  # (pid, tid) -> CPU ticks


def _children() -> dict[int, int]:
    """Every process's parent."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _descends_from(pid: int, root: int, parents: dict[int, int]) -> bool:
    while pid > 1:
        if pid == root:
            return True
        pid = parents.get(pid, 1)
    return False


def workers(root: int) -> dict[int, str]:
    """The worker processes under ``root``: pid -> role (node, ``/child`` for a fork).
    Only ``root``'s descendants: another bench's workers on the machine are not ours."""
    parents = _children()
    found: dict[int, str] = {}
    for pid in parents:
        if not _descends_from(pid, root, parents):
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bench.sql_counts" not in argv:
            continue
        node = argv[argv.index(b"-n") + 1].decode().split("@")[0]
        queues = argv[argv.index(b"-Q") + 1].decode() if b"-Q" in argv else ""
        host = queues.split("compute.", 1)[1].split(",")[0] if "compute." in queues else ""
        found[pid] = f"{node}.{host}" if host else node
    for pid in list(found):
        if parents.get(pid) in found:
            found[pid] = found[parents[pid]] + "/child"
    return found


def snapshot(pids: dict[int, str]) -> Snap:
    snap: Snap = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            snap[(pid, int(tid))] = int(fields[11]) + int(fields[12])  # utime + stime
    return snap


def process_ticks(pids: dict[int, str]) -> dict[int, int]:
    """pid -> the process's CPU ticks, its exited threads' included."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])
    return out


def thread_names(pids: dict[int, str]) -> dict[tuple[int, int], str]:
    """(pid, tid) -> the Python thread's name and its top frame's function, by py-spy."""
    names: dict[tuple[int, int], str] = {}
    if not PYSPY:
        return names
    for pid in pids:
        out = subprocess.run(
            [PYSPY, "dump", "--pid", str(pid), "--nonblocking"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        blocks = re.split(r"\n(?=Thread )", out)
        for block in blocks:
            m = re.match(r'Thread (0x[0-9A-Fa-f]+|\d+) \(\w+\)(?:: "([^"]*)")?', block)
            if not m:
                continue
            lines = [ln.strip() for ln in block.splitlines()[1:] if ln.strip()]
            # the bottom-most frames say what the thread is (its target)
            outer = [ln for ln in lines if "threading.py" not in ln] or lines
            bottom = [ln.split(" (")[0] for ln in outer[-2:]]
            name = (m.group(2) or "?") + " [" + " < ".join(reversed(bottom)) + "]"
            tid_text = m.group(1)
            tid = int(tid_text, 16) if tid_text.startswith("0x") else int(tid_text)
            names[(pid, tid)] = name
    return names


def task_cpu(counts_dir: Path) -> dict[int, int]:
    """pid -> the CPU (us) of the tasks that process ran, from ``bench.sql_counts``."""
    import json

    out = {}
    for path in counts_dir.glob("*.json"):
        try:
            counts = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        out[int(path.stem)] = sum(
            v.get("cpu_us", 0) for k, v in counts.items() if k != sql_counts.OUTSIDE
        )
    return out


def _outside_counted(counts_dir: Path) -> float:
    """The workers' CPU outside tasks as ``bench.sql_counts``'s files say (ms): each
    process's CPU at its last dump, its tasks' aside."""
    out = sql_counts.read_totals(counts_dir).get(sql_counts.OUTSIDE, {})
    return out.get("cpu_us", 0) / 1000


class Window:
    def __init__(self, pids: dict[int, str], counts_dir: Path) -> None:
        self.pids, self.counts_dir = pids, counts_dir

    def __enter__(self) -> Window:
        self.t0, self.snap0, self.task0 = (
            time.monotonic(),
            snapshot(self.pids),
            task_cpu(self.counts_dir),
        )
        self.proc0 = process_ticks(self.pids)
        self.counted0 = _outside_counted(self.counts_dir)
        return self

    def __exit__(self, *_: object) -> None:
        time.sleep(0.5)
        self.seconds = time.monotonic() - self.t0
        self.snap1, self.task1 = snapshot(self.pids), task_cpu(self.counts_dir)
        self.proc1 = process_ticks(self.pids)
        self.counted1 = _outside_counted(self.counts_dir)

    def rows(self, names: dict[tuple[int, int], str]) -> dict[str, float]:
        """label -> ms of CPU in the window; per process ``<role> TASKS`` (the tasks'
        CPU from the counters) is subtracted from the process, shown on its own."""
        ms: dict[str, float] = defaultdict(float)
        for key, ticks in self.snap1.items():
            delta = (ticks - self.snap0.get(key, 0)) * 1000 / TICK
            if delta:
                role = self.pids[key[0]]
                ms[f"{role:<18} {names.get(key, '(new thread)')}"] += delta
        for pid, role in self.pids.items():
            whole = (self.proc1.get(pid, 0) - self.proc0.get(pid, 0)) * 1000 / TICK
            live = sum(
                (v - self.snap0.get(k, 0)) * 1000 / TICK
                for k, v in self.snap1.items()
                if k[0] == pid
            )
            if whole - live:
                ms[f"{role:<18} (threads that exited)"] += whole - live
            t = (self.task1.get(pid, 0) - self.task0.get(pid, 0)) / 1000
            if t:
                ms[f"{role:<18} = TASKS (counted, included above)"] += t
        return ms


def report(
    title: str, windows: list[tuple[Window, int]], names: dict[tuple[int, int], str]
) -> None:
    per_op: dict[str, list[float]] = defaultdict(list)
    for w, n in windows:
        for label, v in w.rows(names).items():
            per_op[label].append(v / n)
    print(f"\n== {title}: ms per op (one value per repetition)")
    total: dict[str, float] = defaultdict(float)
    for label in sorted(per_op):
        vals = per_op[label]
        if max(vals) < 0.05:
            continue
        print(f"  {' '.join(f'{v:6.2f}' for v in vals)}  {label}")
    for w, n in windows:
        rows = w.rows(names)
        total["all"] += sum(v for k, v in rows.items() if "= TASKS" not in k) / n
        total["tasks"] += sum(v for k, v in rows.items() if "= TASKS" in k) / n
    for i, (w, n) in enumerate(windows):
        rows = w.rows(names)
        roles: dict[str, float] = defaultdict(float)
        for k, v in rows.items():
            role = k.split()[0].rsplit(".host", 1)[0]
            roles[role] += -v if "= TASKS" in k else v
        threads: dict[str, float] = defaultdict(float)
        for k, v in rows.items():
            if "= TASKS" not in k:
                role = k.split()[0].rsplit(".host", 1)[0]
                threads[f"{role} {k.split(None, 1)[1].split(' [')[0]}"] += v / n
        print(
            f"  rep {i + 1}: outside by role (ms/op): "
            + ", ".join(f"{r} {v / n:.2f}" for r, v in sorted(roles.items()))
            + f"; sum {sum(roles.values()) / n:.2f}; the counters' files say "
            f"{(w.counted1 - w.counted0) / n:.2f}"
        )
        print(
            "    all CPU by thread kind (ms/op): "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(threads.items()) if v >= 0.05)
        )
    reps = len(windows)
    print(
        f"  total {total['all'] / reps:.2f}, tasks {total['tasks'] / reps:.2f}, "
        f"outside {(total['all'] - total['tasks']) / reps:.2f} ms/op (mean over reps); "
        f"windows {', '.join(f'{w.seconds:.1f}s' for w, _ in windows)}"
    )


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--boots", type=int, default=200)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--repetitions", type=int, default=1)
    p.add_argument("--idle", type=float, default=5.0)
    p.add_argument("--pyspy-dir")
    p.add_argument("--pyspy-s", type=int, default=30)
    p.add_argument(
        "--pyspy-phase",
        default="warm",
        help="start py-spy after the warm-up ('warm'), at the first 'deletes', or at the "
        "second repetition's 'idle' window",
    )
    p.add_argument(
        "--pyspy-all", action="store_true", help="sample every active thread, not only the GIL's"
    )
    return p.parse_args()


def _spy(pid: int, out: Path, seconds: int, gil: bool = True) -> subprocess.Popen[bytes]:
    argv = [PYSPY, "record", "--pid", str(pid), "--nonblocking", "--threads"]
    argv += ["--gil"] if gil else []
    argv += ["-f", "raw", "-r", "250", "-d", str(seconds), "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Runs:
    """The timed windows of both sides, once both clusters are warm."""

    def __init__(self, args: argparse.Namespace, api: Any, side: NovaqSide, bare: BareSide) -> None:
        self.args, self.api, self.side, self.bare = args, api, side, bare
        self.timeout_s = 60.0 + args.boots * 0.5
        self.every = workers(os.getpid())
        self.novaq_p = {p: r for p, r in self.every.items() if not r.startswith("bare-")}
        self.bare_p = {p: r for p, r in self.every.items() if r.startswith("bare-")}
        self.names = thread_names(self.every)
        self.spies: list[subprocess.Popen[bytes]] = []
        self.res: dict[str, list[tuple[Window, int]]] = defaultdict(list)

    def spy(self, phase: str, rep: int, only: str) -> None:
        args = self.args
        wanted = {"warm": -1, "deletes": 0, "idle": 1}.get(args.pyspy_phase)
        if not args.pyspy_dir or args.pyspy_phase != phase or wanted != rep:
            return
        out = Path(args.pyspy_dir)
        out.mkdir(parents=True, exist_ok=True)
        for pid, role in self.every.items():
            if ("host1" in role or "scheduler" in role) and role.startswith(only):
                name = f"{role.replace('/', '_')}-{pid}.txt"
                self.spies.append(_spy(pid, out / name, args.pyspy_s, not args.pyspy_all))

    def repetition(self, rep: int) -> None:
        from bench.boot_bench import FLAVOR, IMAGE
        from bench.boot_runs import _wait

        args, n = self.args, self.args.boots
        self.spy("idle", rep, "compute")  # the held-back events of the first deletes
        idle_n, idle_b = (
            Window(self.novaq_p, self.side.counts_dir),
            Window(self.bare_p, self.bare.counts_dir),
        )
        with idle_n as wn, idle_b as wb:
            time.sleep(args.idle)
        self.res["novaq idle (per second)"].append((wn, int(args.idle)))
        self.res["bare idle (per second)"].append((wb, int(args.idle)))
        uuids: list[str] = []
        with Window(self.novaq_p, self.side.counts_dir) as w:
            for i in range(n):
                uuids += self.api.boot(f"tc-{rep}-{i}", FLAVOR[0], IMAGE)
            _wait("active", self.side._all(uuids, "active"), self.timeout_s)
        self.res["novaq boots"].append((w, n))
        time.sleep(1.0)
        self.spy("deletes", rep, "compute")
        with Window(self.novaq_p, self.side.counts_dir) as w:
            for u in uuids:
                self.api.delete(u)
            _wait("deleted", self.side._all(uuids, None), self.timeout_s)
        self.res["novaq deletes"].append((w, n))
        time.sleep(1.0)
        servers = [f"{rep}-{i}-{time.time_ns()}" for i in range(n)]
        hosts = self.bare.hosts
        boots = [
            ("scheduler.bare_select", {"instance_uuid": s, "request_id": f"r-{s}", "index": i})
            for i, s in enumerate(servers)
        ]
        deletes = [
            ("compute.bare_delete", {"instance_uuid": s, "request_id": f"rd-{s}", "host": h})
            for s, h in zip(servers, [hosts[i % len(hosts)] for i in range(n)], strict=True)
        ]
        self.bare_phase("bare boots", boots)
        self.spy("deletes", rep, "bare-compute")
        self.bare_phase("bare deletes", deletes)

    def bare_phase(self, title: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
        from bench import bare_app
        from bench.boot_runs import _wait

        app = bare_app.app
        with Window(self.bare_p, self.bare.counts_dir) as w:
            ids = [app.signature(name, kwargs=kw).apply_async().id for name, kw in calls]
            _wait(title, self.bare._all_done(ids), self.timeout_s)
        self.res[title].append((w, len(calls)))
        time.sleep(1.0)


def main() -> int:
    args = _parse_args()
    if args.pyspy_dir and not PYSPY:
        print("thread_cpu: --pyspy-dir needs py-spy (on the PATH or in $PY_SPY)", file=sys.stderr)
        return 2
    for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
        del os.environ[name]
    import redis

    from bench import bare_app
    from bench.boot_bench import FLAVOR, IMAGE, heartbeat_service
    from bench.boot_clusters import bare_cluster, novaq_cluster
    from bench.boot_runs import BareSide, NovaqSide
    from bench.broker_stats import with_db
    from models.db import dispose_all
    from novaq.launcher.demo import point_api_at
    from novaq.launcher.embedded_broker import EmbeddedRedis
    from novaq.settings import load_settings

    state = Path(tempfile.mkdtemp(prefix="novaq-thread-cpu-"))
    broker = EmbeddedRedis(state / "broker").start()
    novaq_url, bare_url = with_db(broker.url, 3), with_db(broker.url, 8)
    clients = [redis.Redis.from_url(u) for u in (novaq_url, bare_url)]
    hosts = [f"host{i}" for i in range(1, args.hosts + 1)]
    os.environ["NOVAQ_BROKER_URL"] = novaq_url
    os.environ["NOVAQ_STATE_DIR"] = str(state)
    bare_app.configure(bare_url)
    bare_counts, novaq_counts = state / "bare-counts", state / "sqlite" / "sql-counts"
    bare_counts.mkdir(parents=True)
    novaq_counts.mkdir(parents=True)
    bare_settings = load_settings(state_dir=state / "bare", broker_url=bare_url)
    bare_w = bare_cluster(bare_settings, args.hosts, hosts, bare_counts)
    db_url = f"sqlite:///{state / 'sqlite' / 'novaq.sqlite'}"
    settings = load_settings(state_dir=state / "sqlite", database_url=db_url, broker_url=novaq_url)
    novaq_w = novaq_cluster(settings, args.hosts, novaq_counts)
    runs = None
    try:
        bare_w.start()
        bare_w.wait_ready(timeout_s=120.0)
        bare = BareSide(bare_app.app, hosts, clients[0], clients[1], bare_counts)
        novaq_w.start()
        novaq_w.wait_ready(timeout_s=120.0)
        point_api_at(novaq_w)
        from workflows import api

        api.create_flavor(*FLAVOR)
        service_id = heartbeat_service(db_url, hosts[0])
        side = NovaqSide(api, db_url, novaq_counts, clients[0], service_id, FLAVOR[0], IMAGE)
        timeout_s = 60.0 + args.boots * 0.5
        side.run("warm", args.warmup, timeout_s)
        bare.run(args.warmup, timeout_s)
        runs = Runs(args, api, side, bare)
        runs.spy("warm", -1, "")
        for rep in range(args.repetitions):
            runs.repetition(rep)
        for title, windows in runs.res.items():
            report(title, windows, runs.names)
        side.close()
    finally:
        for spy in runs.spies if runs else []:
            spy.wait(timeout=args.pyspy_s + 30)
        novaq_w.stop()
        bare_w.stop()
        dispose_all()
        for c in clients:
            c.close()
        broker.stop()
        if not os.environ.get("THREAD_CPU_KEEP"):
            shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
