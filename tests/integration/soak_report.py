"""The soak's verdict and its printed report: what was asked, what was injected, what is
stuck, lost or leaked."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.integration.checks import leaks
from tests.integration.soak import SoakReport

#: Lines of a long list printed before "... and N more".
SHOWN = 40


def verdict(report: SoakReport) -> list[str]:
    """Why the run is not clean, one reason per kind of finding; empty when clean."""
    found = {
        "servers stuck": len(report.stuck),
        "operations lost": len(report.lost),
        "leaks with live servers": len(leaks(report.audit_live)) if report.audit_live else 0,
        "leaks after deleting all": len(leaks(report.audit)) if report.audit else 0,
        "usage mismatches": len(report.usage_mismatches_live) + len(report.usage_mismatches),
        "workers that died on their own": len(report.worker_exits),
        "faults that went wrong": len(report.fault_errors),
    }
    reasons = [f"{count} {what}" for what, count in found.items() if count]
    if not report.audit:
        reasons.append("the run did not reach the final audit")
    return reasons


def print_report(report: SoakReport | None, crashed: str | None = None) -> bool:
    """Print the figures and findings; whether the run is clean."""
    if report is None:
        print(f"RESULT: FAILED before the soak began: {crashed}")
        return False
    ops = sum(report.operations.values())
    rate = ops / report.seconds if report.seconds else 0.0
    print("\n== soak report")
    print(f"operations accepted: {ops} {_dict(report.operations)}")
    print(f"requests refused: {sum(report.refused.values())} {_dict(report.refused)}")
    print(f"run {report.seconds:.1f} s ({rate:.1f} accepted/s), ", end="")
    print(f"settling {report.settle_seconds:.1f} s")
    print(f"faults injected: {_dict(report.injected)}")
    _lines("fault log", report.fault_log)
    _lines("faults that went wrong", report.fault_errors)
    _lines("workers that died on their own (restarted once faults ended)", report.worker_exits)
    print(f"final statuses: {_dict(report.statuses)}")
    _lines("ERROR faults", [f"{n} x {m}" for m, n in report.faults.most_common()])
    _lines("servers written by refused requests", report.unknown_servers)
    states = Counter(f"{d['phase']}: {d['status']}/{d['task_state']}" for d in report.stuck_details)
    print(f"STUCK servers per phase and state: {_dict(states)}")
    _lines("STUCK servers", report.stuck)
    print(f"LOST operations per kind: {_dict(report.lost_kinds)}")
    print(f"LOST operations per fault met: {_dict(report.lost_by_fault)}")
    _lines("LOST operations (accepted, never finished)", report.lost)
    print(f"events left open (a gap in the record, not counted): {len(report.open_events)}")
    for title, audit, mismatches in (
        ("audit with live servers", report.audit_live, report.usage_mismatches_live),
        ("audit after deleting all", report.audit, report.usage_mismatches),
    ):
        if not audit:
            print(f"{title}: not reached")
            continue
        _lines(f"{title}: leaks", leaks(audit))
        _lines(f"{title}: usage mismatches", mismatches)
    reasons = verdict(report)
    if crashed:
        reasons.append(f"the soak raised {crashed}")
    print("RESULT:", "CLEAN" if not reasons else "FAILED: " + "; ".join(reasons))
    return not reasons


def _dict(counter: Any) -> str:
    return str(dict(sorted(counter.items())))


def _lines(title: str, lines: list[str]) -> None:
    print(f"{title}: {len(lines)}")
    for line in lines[:SHOWN]:
        print("  ", line)
    if len(lines) > SHOWN:
        print(f"   ... and {len(lines) - SHOWN} more")
