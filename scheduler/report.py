"""What the scheduler tells an operator when no host is left (issue 15, defect 4).

An instance fault's message is cut at 255 characters (Nova's column), so the message names
what decided first: the filter that removed the last hosts, then every other filter that
removed some, then the facts about the candidates (the placement pre-filter, a requested
host). The whole per-filter list, filters that removed nothing included, goes to the
fault's details (``compute.instance_actions.add_fault`` writes ``fault_details``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from novaq.exceptions import NoValidHost

#: Nova's ``instance_faults.message`` is a String(255).
MESSAGE_LIMIT = 255
_PREFIX = len(NoValidHost.msg_fmt % {"reason": ""})


@dataclass(frozen=True, slots=True)
class FilterStep:
    """One filter's pass (or one narrowing of the candidates): hosts before and after."""

    name: str
    before: int
    after: int

    @property
    def removed(self) -> int:
        return self.before - self.after

    def __str__(self) -> str:
        return f"{self.name}: {self.before} -> {self.after}"

    def summary(self) -> str:
        hosts = "host" if self.removed == 1 else "hosts"
        return f"{self.name} removed {self.removed} {hosts} ({self.before} -> {self.after})"


def no_valid_host(steps: Sequence[FilterStep], facts: Sequence[str] = ()) -> NoValidHost:
    """``NoValidHost`` naming the deciding filter first, fit to the fault's 255 characters,
    with every step and fact in its ``fault_details``."""
    removers = [s for s in steps if s.removed > 0]
    decider = next((s for s in reversed(removers) if s.after == 0), None)
    ordered = ([decider] if decider else []) + [s for s in removers if s is not decider]
    parts = [s.summary() for s in ordered] + list(facts)
    if not parts:
        parts = ["no compute hosts"]
    details = "\n".join([*(str(s) for s in steps), *facts]) or "no compute hosts"
    return NoValidHost(reason=_fit(parts), fault_details=details)


def _fit(parts: list[str]) -> str:
    """``parts`` joined, whole ones only, within the fault message's limit; what is left
    out is counted and pointed to."""
    room = MESSAGE_LIMIT - _PREFIX
    kept: list[str] = []
    for index, part in enumerate(parts):
        left = len(parts) - index - 1
        tail = f"; and {left} more in the fault's details." if left else "."
        candidate = "; ".join([*kept, part]) + tail
        if len(candidate) > room:
            break
        kept.append(part)
    if len(kept) == len(parts):
        return "; ".join(kept) + "."
    left = len(parts) - len(kept)
    if not kept:  # one part alone is too long: cut it, the details keep it whole
        return parts[0][: room - 40] + f"… and {left - 1} more in the fault's details."
    return "; ".join(kept) + f"; and {left} more in the fault's details."
