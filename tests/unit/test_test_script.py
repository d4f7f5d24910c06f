"""``scripts/test`` runs every step even when one fails, and lists the failures at the end
with exit status 1 (issue 15, defect 6: a failing unit tier hid the integration tier).

The real script runs in a copy of the repository's layout whose tools are stand-ins: each
records that it ran and exits with the status the test asks of it. What is under test is
the script's own control flow, so that is the only real part.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("ruff", "lint-imports", "mypy", "python")
STEPS = (
    "ruff",
    "lint-imports",
    "mypy",
    "tests/unit",
    "nova-venv",
    "tests/differential",
    "tests/integration",
    "tests/hypervisor",
)


def _stand_in(path: Path, record: Path) -> None:
    """A tool that appends its name (for pytest: the tier) to ``record`` and exits with
    ``$STATUS_<name>`` (0 by default)."""
    path.write_text(
        "#!/usr/bin/env bash\n"
        'name=$(basename "$0")\n'
        'if [ "$name" = python ]; then name=$3; fi\n'  # python -m pytest tests/<tier> ...
        f'echo "$name" >> {record}\n'
        f'echo "$*" >> {record}.argv\n'  # every call's arguments, one line each
        'var="STATUS_$(echo "$name" | tr -c "a-zA-Z0-9\\n" _)"\n'
        'exit "${!var:-0}"\n'
    )
    path.chmod(0o755)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with the real ``scripts/test`` and stand-ins for everything it runs."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "test", tmp_path / "scripts" / "test")
    record = tmp_path / "ran"
    for script in ("bootstrap", "nova-venv", "hypervisor-up", "build-test-image"):
        _stand_in(tmp_path / "scripts" / script, record)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    for tool in TOOLS:
        _stand_in(tmp_path / ".venv" / "bin" / tool, record)
    return tmp_path


def _run(repo: Path, **statuses: int) -> tuple[int, str, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATUS_")}
    env.update({f"STATUS_{name}": str(status) for name, status in statuses.items()})
    done = subprocess.run(
        [str(repo / "scripts" / "test")], env=env, capture_output=True, text=True, timeout=60
    )
    lines = (repo / "ran").read_text().splitlines()
    # (ruff runs twice, check then format, when the check passes)
    ran = list(dict.fromkeys(line for line in lines if line in STEPS))
    return done.returncode, done.stdout, ran


def test_every_step_runs_after_failures_and_all_failures_are_listed(repo: Path) -> None:
    status, out, ran = _run(repo, ruff=1, tests_unit=1, nova_venv=1, tests_hypervisor=2)

    assert status == 1
    # The integration tier ran after the unit tier failed; the differential tier after
    # Nova's virtualenv could not be made (its tests then fail, each saying why).
    assert ran == list(STEPS)
    assert out.endswith(
        "4 step(s) failed:\n  - lint: ruff\n  - unit tier\n"
        "  - differential set-up (Nova 34's virtualenv)\n  - hypervisor tier\n"
    )


def test_all_passing_exits_0_and_no_tests_collected_is_not_a_failure(repo: Path) -> None:
    status, out, ran = _run(repo, tests_integration=5)

    assert status == 0, out
    assert ran == list(STEPS)
    assert out.endswith("every step passed\n")


def test_a_failed_bootstrap_stops_at_once(repo: Path) -> None:
    status, _, ran = _run(repo, bootstrap=1)

    assert status == 1
    assert ran == []


def test_the_unit_tier_runs_in_four_processes_unless_told_otherwise(repo: Path) -> None:
    """It mostly waits (in-thread workers, the API's waits): four processes on two cores."""
    env = {k: v for k, v in os.environ.items() if k != "NOVAQ_UNIT_PROCESSES"}
    for processes in (None, "6"):
        if processes is not None:
            env["NOVAQ_UNIT_PROCESSES"] = processes
        subprocess.run([str(repo / "scripts" / "test")], env=env, capture_output=True, timeout=60)
    calls = (repo / "ran.argv").read_text().splitlines()
    unit = [c.split() for c in calls if c.startswith("-m pytest tests/unit ")]

    assert [argv[argv.index("-n") + 1] for argv in unit] == ["4", "6"]


def test_the_integration_tier_runs_in_two_processes_a_module_per_process(repo: Path) -> None:
    """Its clusters are per process (Redis and PostgreSQL databases, vhosts, state
    directory), and a fault matrix's module-scoped cluster must not start in each."""
    subprocess.run([str(repo / "scripts" / "test")], capture_output=True, timeout=60)
    calls = (repo / "ran.argv").read_text().splitlines()
    integration = [c.split() for c in calls if c.startswith("-m pytest tests/integration ")]

    assert len(integration) == 1
    argv = integration[0]
    assert argv[argv.index("-n") + 1] == "2"
    assert argv[argv.index("--dist") + 1] == "loadscope"
    assert argv[argv.index("-m", 1) + 1] == "integration"
