"""``api.audit`` / ``novaq audit``: which hosts it asks, and how long it waits for them."""

from __future__ import annotations

import time

import pytest

from novaq.exceptions import ComputeHostNotFound
from tests.factories import make_compute_node
from tests.unit.cli import novaq, novaq_json
from tests.unit.workflows.servers import clear_queues
from workflows import api

SILENT = ("quiet1", "quiet2", "quiet3", "quiet4")


@pytest.fixture
def silent_hosts(db_url: str) -> list[str]:
    """Four up compute hosts whose queues nobody consumes: they never answer."""
    for host in SILENT:
        make_compute_node(db_url, host)
    yield list(SILENT)
    clear_queues(*(f"compute.{h}" for h in SILENT))


def test_hosts_that_do_not_answer_cost_one_timeout_in_all(silent_hosts: list[str]) -> None:
    started = time.monotonic()
    report = api.audit(timeout=0.5)
    elapsed = time.monotonic() - started
    # One deadline for every answer: waited one after the other, four silent hosts would
    # take at least 4 x 0.5 s.
    assert elapsed < 1.9, elapsed
    assert sorted(n["host"] for n in report["nodes"]) == silent_hosts


def test_audit_of_some_hosts_reports_only_their_nodes(silent_hosts: list[str]) -> None:
    report = api.audit(timeout=0.2, hosts=["quiet2"])
    assert [n["host"] for n in report["nodes"]] == ["quiet2"]
    assert [n["host"] for n in novaq_json("audit", "--host", "quiet3")["nodes"]] == ["quiet3"]


def test_audit_of_an_unknown_host_is_refused(silent_hosts: list[str]) -> None:
    with pytest.raises(ComputeHostNotFound, match="nosuch"):
        api.audit(timeout=0.2, hosts=["quiet1", "nosuch"])
    result = novaq("audit", "--host", "nosuch")
    assert result.exit_code == 1 and "ERROR (ComputeHostNotFound)" in result.output
