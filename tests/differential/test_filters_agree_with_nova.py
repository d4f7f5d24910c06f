"""novaq's filters against Nova 34's own, verdict by verdict, on randomized host states and
requests (``tests/differential/cases.py``). Nova runs in its own virtualenv
(``scripts/nova-venv``, made on first use: nova is no dependency of novaq) as a
subprocess answering in JSON lines (``tests/differential/nova_verdicts.py``).

Every filter both have is compared; AvailabilityZoneFilter, which Nova 34 no longer has,
against what replaced it (the ``map_az_to_placement_aggregate`` request filter and
placement's ``member_of``). CoreFilter, RamFilter and DiskFilter have no Nova 34
counterpart but placement itself, which is not in the ``nova`` package.

An image Nova's objects refuse to build (metadata Nova's API refuses before scheduling)
must be refused by novaq's image store too (``workflows.api.images_store``), and so must a
flavor's PCI alias spec or a zone Nova's API refuses; where Nova's filter raises (a bug
there: the whole request fails), novaq's must refuse the host; the verdicts novaq keeps
different on purpose are recognised exactly (``tests/differential/known_divergences.py``);
for every other case the two filters must say the same.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from novaq.exceptions import InvalidImage
from scheduler.filters import load_filters
from tests.differential.cases import hosts, novaq_host, novaq_settings, novaq_spec, requests
from tests.differential.known_divergences import known_divergence
from tests.differential.nova_process import Nova
from tests.differential.zones_pci_groups import novaq_flavor_problem, novaq_zone_problem
from workflows.api.images_store import check_properties

FILTERS = [
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "SameHostFilter",
    "DifferentHostFilter",
    "NumInstancesFilter",
    "IoOpsFilter",
    "AggregateIoOpsFilter",
    "AggregateNumInstancesFilter",
    "AggregateTypeAffinityFilter",
    "AllHostsFilter",
    "AvailabilityZoneFilter",
    "AggregateInstanceExtraSpecsFilter",
    "IsolatedHostsFilter",
    "PciPassthroughFilter",
    "ServerGroupAffinityFilter",
    "ServerGroupAntiAffinityFilter",
]
BATCH = 40
EXAMPLES = int(os.environ.get("NOVAQ_DIFFERENTIAL_EXAMPLES", "25"))


def _novaq_verdict(name: str, case: dict[str, Any]) -> bool | str:
    try:
        check_properties(case["request"]["image_properties"])
    except InvalidImage as exc:
        return f"invalid: {exc}"
    problem = novaq_flavor_problem(case["request"]) or novaq_zone_problem(case)
    if problem is not None:
        return f"invalid: {problem}"
    (flt,) = load_filters(novaq_settings(case["request"]), [name])
    host, spec = novaq_host(case["host"]), novaq_spec(case["request"])
    passes = flt.host_passes(host, spec)
    # The scheduler runs filter_all, whose shortcuts (``ignores``) must say the same.
    if (flt.filter_all([host], spec) == [host]) != passes:
        return f"inconsistent: host_passes {passes}, filter_all {not passes}"
    return passes


def _same(novaq: bool | str, nova: bool | str, case: dict[str, Any] | None = None) -> bool:
    if case is not None and known_divergence(case, novaq, nova):
        return True
    if isinstance(nova, str) and nova.startswith("refused:"):
        return novaq is False  # PciPassthroughFilter: see known_divergence
    if isinstance(nova, str) and nova.startswith("raised:"):
        # Nova's filter raised (e.g. a numeric operator on a text capability), which
        # fails Nova's whole request; novaq refuses that host instead (the filters'
        # docstrings say so). Either way the host is not chosen.
        return novaq is False
    if isinstance(novaq, str) and novaq.startswith("inconsistent:"):
        return False
    if isinstance(novaq, str) or isinstance(nova, str):
        return isinstance(novaq, str) and isinstance(nova, str)  # both refuse the image
    return novaq == nova


Pairs = list[tuple[dict[str, Any], dict[str, Any]]]


@pytest.fixture(scope="module")
def batches() -> list[Pairs]:
    """The randomized cases, drawn once and asked of every filter: drawing them is most of
    the tier's time, and (derandomized) each filter's own draw would be the same anyway."""
    drawn: list[Pairs] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(st.tuples(hosts(), requests()), min_size=BATCH, max_size=BATCH))
    def draw(pairs: Pairs) -> None:
        drawn.append(pairs)

    draw()
    return drawn


def test_nova_has_every_filter_compared(nova: Nova) -> None:
    assert set(FILTERS) <= nova.filters


def test_every_filter_is_asked_hundreds_of_cases(batches: list[Pairs]) -> None:
    assert sum(len(pairs) for pairs in batches) >= min(EXAMPLES * BATCH, 400)


# A failing batch's repr is long: the assertion's message names the one case that differs.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@pytest.mark.parametrize("name", FILTERS)
def test_the_filter_gives_nova_s_verdicts(nova: Nova, batches: list[Pairs], name: str) -> None:
    for pairs in batches:
        cases = [{"filter": name, "host": h, "request": r} for h, r in pairs]
        theirs = nova.verdicts(cases)
        for case, nova_says in zip(cases, theirs, strict=True):
            novaq_says = _novaq_verdict(name, case)
            assert _same(novaq_says, nova_says, case), (
                f"{name}: novaq {novaq_says!r}, Nova {nova_says!r}\n"
                f"host={json.dumps(case['host'])}\nrequest={json.dumps(case['request'])}"
            )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
