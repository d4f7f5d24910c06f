"""Leak soak, long form: many cycles of random boot and delete on real workers with spawn
failures injected and a compute worker SIGKILLed and restarted several times; prints
figures and exits non-zero if the accounting is not exact afterwards.

    .venv/bin/python bench/leak_soak.py --cycles 500 --kills 5

Needs Redis (database 14) and PostgreSQL on loopback; uses a database of its own.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PG_DB = f"novaq_soak_{os.getpid()}"
STATE = Path(tempfile.mkdtemp(prefix="novaq-soak-"))
for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
    del os.environ[name]
os.environ.update(
    NOVAQ_STATE_DIR=str(STATE),
    NOVAQ_BROKER_URL="redis://127.0.0.1:6379/14",
    NOVAQ_DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{PG_DB}",
    NOVAQ_REPORT_INTERVAL="1",
    NOVAQ_SERVICE_DOWN_TIME="6",
    NOVAQ_CELERY__VISIBILITY_TIMEOUT="15",
    NOVAQ_CELERY__UNACKED_RESTORE_INTERVAL="2",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--down-seconds",
        type=float,
        default=0.5,
        help="how long a killed worker stays dead (over 6 s: the API deletes locally)",
    )
    args = parser.parse_args()

    import redis
    from sqlalchemy import create_engine, text

    from models.migrate import upgrade
    from tests.integration.soak import run_soak
    from tests.integration.workers import start_cluster

    admin = create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:5432/test", isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{PG_DB}"'))
    broker = redis.Redis(db=14)
    broker.flushdb()
    cluster = None
    try:
        upgrade(os.environ["NOVAQ_DATABASE_URL"])
        from novaq.settings import get_settings
        from workflows.api.images import ensure_demo_image

        ensure_demo_image(get_settings())  # the "cirros" image the soak boots
        chaos = {}
        for host in ("soak1", "soak2"):
            config = STATE / f"{host}.toml"
            config.write_text(f'[[hosts]]\nname = "{host}"\nspawn_failure_rate = 0.15\n')
            chaos[host] = {"NOVAQ_CONFIG": str(config)}
        cluster = start_cluster(STATE, ["soak1", "soak2"], extra_env=chaos)
        from workflows import api

        report = run_soak(
            api,
            cluster,
            victim="soak1",
            cycles=args.cycles,
            kills=args.kills,
            seed=args.seed,
            settle_timeout_s=300,
            down_s=args.down_seconds,
        )
    finally:
        if cluster is not None:
            cluster.stop()
        from models.db import dispose_all

        dispose_all()
        broker.flushdb()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)'))
    ops = sum(report.operations.values())
    print(
        f"operations: {dict(report.operations)} in {report.seconds:.1f} s "
        f"({ops / report.seconds:.1f} ops/s), settle {report.settle_seconds:.1f} s"
    )
    print(f"final statuses: {dict(report.statuses)}; worker SIGKILLs: {report.kills}")
    print(f"faults: {dict(report.faults)}")
    print(f"stuck in a transitional state: {len(report.stuck)}")
    print(
        f"audit with live servers: {report.audit_live['leaks']} leaks; "
        f"usage mismatches: {len(report.usage_mismatches_live)}"
    )
    print(
        f"audit after deleting all: {report.audit['leaks']} leaks; "
        f"usage mismatches: {len(report.usage_mismatches)}"
    )
    for detail in report.stuck_details:
        print("  was stuck:", detail)
    for line in report.usage_mismatches_live + report.usage_mismatches:
        print("  mismatch:", line)
    for node in report.audit_live["nodes"] + report.audit["nodes"]:
        for finding in node["discrepancies"]:
            print("  discrepancy:", node["host"], finding)
    clean = not (
        report.stuck
        or report.audit_live["leaks"]
        or report.audit["leaks"]
        or report.usage_mismatches_live
        or report.usage_mismatches
    )
    print("RESULT:", "no leak" if clean else "LEAK")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
