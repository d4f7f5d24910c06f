"""``scripts/bench`` (``make bench``) runs every ``bench/*_bench.py`` and nothing else,
each to its end even after one failed, within one time budget for them all.

The real script runs in a copy of the repository's layout whose benchmarks are
stand-ins: each records that it ran and exits as its name says."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _repo(tmp_path: Path, benches: dict[str, str]) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "bench", tmp_path / "scripts" / "bench")
    (tmp_path / "bench").mkdir()
    for name, body in benches.items():
        (tmp_path / "bench" / name).write_text(
            f"from pathlib import Path\nwith Path('ran').open('a') as f: f.write('{name}\\n')\n"
            + body
        )
    return tmp_path


def _run(repo: Path, budget_s: int = 60) -> tuple[int, str, list[str]]:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "BENCH_BUDGET_S": str(budget_s)}
    done = subprocess.run(
        [str(repo / "scripts" / "bench")], cwd=repo, env=env, capture_output=True, text=True
    )
    ran = (repo / "ran").read_text().splitlines() if (repo / "ran").exists() else []
    return done.returncode, done.stdout, ran


def test_every_benchmark_runs_the_soak_does_not_and_a_failure_is_listed(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "audit_bench.py": "raise SystemExit(1)\n",
            "boot_bench.py": "",
            "leak_soak.py": "",
            "scheduler_bench.py": "",
        },
    )
    status, out, ran = _run(repo)

    assert ran == ["audit_bench.py", "boot_bench.py", "scheduler_bench.py"]
    assert status == 1
    assert out.endswith("1 benchmark(s) failed:\n  - bench/audit_bench.py\n")


def test_a_benchmark_past_the_budget_is_stopped_and_the_rest_not_started(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"a_bench.py": "import time\ntime.sleep(30)\n", "b_bench.py": ""})
    status, out, ran = _run(repo, budget_s=1)

    assert ran == ["a_bench.py"]
    assert status == 1
    assert "bench/b_bench.py: not run, the 1 s budget is spent" in out
