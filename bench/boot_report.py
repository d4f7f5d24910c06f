"""The tables ``bench/boot_bench.py`` prints: medians over the repetitions, ratios
novaq/bare measured in the same run, and the durable bare app's against both when the run
had it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bench import sql_counts
from bench.boot_runs import API, Counts, Phase, Repetition

#: The SQL columns: (header, the counts it adds up).
SQL_COLUMNS = (
    ("SQL", ("statements",)),
    ("txns", ("transactions",)),
    ("commits", ("write_commits", "read_commits")),
    ("of them writing", ("write_commits",)),
    ("read-only", ("read_commits",)),
    ("rollbacks", ("rollbacks",)),
    ("CPU ms", ("cpu_us",)),  # microseconds summed, shown in ms (``_per_op``)
    ("SQLite lock ms", ("lock_us",)),
    ("CPU in lock ms", ("lock_cpu_us",)),
)
CPU = "CPU ms"  # the one column both sides have: the bare app runs no SQL
SQL_HEADERS = tuple(header for header, _ in SQL_COLUMNS)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [f"\n{title}", line, "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0:
            return "0"
        return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


#: database -> "novaq", "bare", "durable" (the compared runs) or "heartbeat" (the probe's)
#: -> runs
Runs = dict[str, dict[str, list[Repetition]]]
NOVAQ, BARE, DURABLE = "novaq", "bare", "durable"


def _compared(sides: dict[str, list[Repetition]]) -> list[str]:
    """The sides a database's run measured, novaq first (the durable app may be left
    out)."""
    return [side for side in (NOVAQ, BARE, DURABLE) if sides.get(side)]


def _rate(repetitions: Sequence[Repetition], phase: str) -> float:
    """The median boots/s or deletes/s (``phase``) of a side's repetitions."""
    return _median([getattr(r, phase).per_s for r in repetitions])


def _call_ms(repetitions: Sequence[Repetition]) -> list[float]:
    """Every boot call's latency (``api.boot``, or the bare apps' publish) of a side."""
    return [ms for r in repetitions for ms in r.boots.call_ms]


def throughput(runs: Runs) -> str:
    rows = []
    for database, sides in runs.items():
        row: list[object] = [database]
        for phase in ("boots", "deletes"):
            novaq, bare = _rate(sides[NOVAQ], phase), _rate(sides[BARE], phase)
            row += [novaq, bare, novaq / bare]
        rows.append(row)
    headers: tuple[str, ...] = ("database", "novaq boots/s", "bare boots/s", "ratio")
    headers += ("novaq deletes/s", "bare deletes/s", "ratio")
    return table("Throughput (median of the repetitions; ratio = novaq/bare)", headers, rows)


def against_durable(runs: Runs) -> str:
    """The durable bare app against the bare one and novaq against it: how much of the gap
    to the bare app is durability itself (one write transaction a step, nothing else)."""
    rows = []
    for database, sides in runs.items():
        if not sides.get(DURABLE):
            continue
        row: list[object] = [database]
        for phase in ("boots", "deletes"):
            novaq, bare, durable = (_rate(sides[side], phase) for side in (NOVAQ, BARE, DURABLE))
            row += [durable, durable / bare, novaq / durable]
        novaq_p50, durable_p50 = (percentile(_call_ms(sides[s]), 0.5) for s in (NOVAQ, DURABLE))
        rows.append([*row, durable_p50, novaq_p50 / durable_p50])
    if not rows:
        return ""
    headers: tuple[str, ...] = ("database", "durable boots/s", "durable/bare", "novaq/durable")
    headers += ("durable deletes/s", "durable/bare", "novaq/durable")
    headers += ("durable publish p50 ms", "api.boot p50 / durable publish p50")
    title = (
        "The durable bare app (the bare app recording each step in the run's database; its "
        "servers with a guest under --durable-guest) against the bare app and novaq (median "
        "of the repetitions)"
    )
    return table(title, headers, rows)


def _per_op(phases: Sequence[Phase], fields: Sequence[str], step: str | None = None) -> float:
    """The median over repetitions of ``fields`` (summed) per operation (all steps, or
    one)."""
    values = []
    for p in phases:
        buckets = p.sql.values() if step is None else [p.sql.get(step, {})]
        total = sum(b.get(f, 0) for b in buckets for f in fields)
        in_us = all(f.endswith("_us") for f in fields)
        values.append(total / 1000 / p.count if in_us else total / p.count)
    return _median(values)


def per_operation(runs: Runs) -> str:
    rows = []
    for database, sides in runs.items():
        for phase in ("boots", "deletes"):
            for side in _compared(sides):
                phases = [getattr(r, phase) for r in sides[side]]
                sql = [
                    _per_op(phases, fields) if side == NOVAQ or header == CPU else math.nan
                    for header, fields in SQL_COLUMNS
                ]
                broker = [
                    _median([getattr(p.broker, f) / p.count for p in phases])
                    for f in ("connections", "hello", "ping")
                ]
                rows.append([database, phase[:-1], side, *sql, *broker])
    headers = ("database", "per", "side", *SQL_HEADERS, "broker connections", "HELLO", "PING")
    return table(
        "Per boot and per delete (median of the repetitions; SQL in every novaq process; "
        "CPU ms: the workers' processes and the public call's thread, broker and "
        "subprocesses aside)",
        headers,
        rows,
    )


def by_step(runs: Runs) -> str:
    rows = []
    for database, sides in runs.items():
        for phase in ("boots", "deletes"):
            for side in _compared(sides):
                phases = [getattr(r, phase) for r in sides[side]]
                steps = sorted({s for p in phases for s in p.sql}, key=_step_order)
                for step in steps:
                    values = [
                        _per_op(phases, fields, step) if side == NOVAQ or h == CPU else math.nan
                        for h, fields in SQL_COLUMNS
                    ]
                    rows.append([database, phase[:-1], side, step, *values])
    return table(
        "SQL and CPU per operation, by step (API: the public call in the bench's process)",
        ("database", "per", "side", "step", *SQL_HEADERS),
        rows,
    )


def _step_order(step: str) -> tuple[int, str]:
    return (0 if step == API else 2 if step == sql_counts.OUTSIDE else 1, step)


def latency(runs: Runs) -> str:
    rows = []
    for database, sides in runs.items():
        novaq, bare = _call_ms(sides[NOVAQ]), _call_ms(sides[BARE])
        n50, n95, b50, b95 = (percentile(v, q) for v in (novaq, bare) for q in (0.5, 0.95))
        rows.append([database, n50, n95, b50, b95, n50 / b50, n95 / b95])
    headers: tuple[str, ...] = ("database", "api.boot p50 ms", "p95 ms", "bare publish p50 ms")
    headers += ("p95 ms", "ratio p50", "ratio p95")
    title = "api.boot vs the bare app's publish (every call of every repetition)"
    return table(title, headers, rows)


def heartbeat(runs: Runs) -> str:
    rows = []
    for database, sides in runs.items():
        samples = [ms for r in sides["heartbeat"] for ms in r.heartbeat_ms]
        errors = sum(len(r.heartbeat_errors) for r in sides["heartbeat"])
        rate = _median([r.boots.per_s for r in sides["heartbeat"]])
        quantiles = (percentile(samples, q) for q in (0.5, 0.95, 1.0))
        rows.append([database, rate, len(samples), *quantiles, errors])
    return table(
        "Heartbeat under load (novaq's heartbeat every 50 ms during the boots of one more run)",
        ("database", "boots/s meanwhile", "samples", "p50 ms", "p95 ms", "max ms", "errors"),
        rows,
    )


def issuing(runs: Runs) -> str:
    """How long issuing the deletes took against the whole phase: a share near 1 says
    the serial issuing, not the workers, bounded deletes/s."""
    rows = []
    for database, sides in runs.items():
        for side in _compared(sides):
            issue = _median([r.deletes.issue_s for r in sides[side]])
            whole = _median([r.deletes.seconds for r in sides[side]])
            rows.append([database, side, issue, whole, issue / whole])
    return table(
        "Deletes: issuing them (first call to the last return) against the phase (median s)",
        ("database", "side", "issuing s", "phase s", "share"),
        rows,
    )


def report(runs: Runs) -> str:
    parts = (throughput, against_durable, per_operation, by_step, latency, issuing, heartbeat)
    return "\n".join(text for text in (f(runs) for f in parts) if text)


__all__ = ["Counts", "report"]
