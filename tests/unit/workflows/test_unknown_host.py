"""Every API naming a host refuses one that names no compute service (issue 15, defect 3),
as Nova 2.56+ does: ``ComputeHostNotFound`` naming the host, and nothing written (no
migration, action, fault or service change, no message queued). A host whose compute
service was deleted is as unknown."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from models import InstanceFault, Service
from models.db import session_scope
from novaq.cli import main
from novaq.exceptions import ComputeHostNotFound
from tests.factories import make_compute_node
from tests.unit.workflows.bad_input import make_world, state
from workflows import api

PER_HOST_TASK = "_sync_power_states"


@pytest.fixture
def world(db_url: str) -> dict[str, Any]:
    world = make_world(db_url)
    make_compute_node(db_url, "gone")
    with session_scope(db_url) as session:
        service = session.scalars(select(Service).where(Service.host == "gone")).one()
        service.deleted = service.id
    return world


def _written(db_url: str) -> tuple[Any, ...]:
    with session_scope(db_url) as session:
        faults = int(session.scalar(select(func.count()).select_from(InstanceFault)) or 0)
    return state(db_url), faults


#: (id, call, args with "$host" for the host and "$uuid"/"$agg" for the world's).
CALLS: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]] = [
    ("migrate", "migrate", ("$uuid",), {"host": "$host"}),
    ("boot-forced-host", "boot", ("vm", "m1", "cirros"), {"availability_zone": "nova:$host"}),
    ("service-disable", "disable_service", ("$host",), {"reason": "bad disk"}),
    ("service-enable", "enable_service", ("$host",), {}),
    ("service-force-down", "force_down_service", ("$host",), {}),
    ("aggregate-add-host", "add_host_to_aggregate", ("$agg", "$host"), {}),
    ("periodic-run", "run_periodic_task", (PER_HOST_TASK,), {"host": "$host"}),
]


def _fill(value: Any, world: dict[str, Any], host: str) -> Any:
    if not isinstance(value, str):
        return value
    known = {"$uuid": world["uuid"], "$agg": world["aggregate"], "$host": host}
    return known.get(value, value.replace("$host", host))


@pytest.mark.parametrize("host", ["host99", "gone"])
@pytest.mark.parametrize(("call", "args", "kwargs"), [pytest.param(*c[1:], id=c[0]) for c in CALLS])
def test_an_api_naming_an_unknown_host_refuses_it_and_writes_nothing(
    db_url: str,
    world: dict[str, Any],
    host: str,
    call: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    before = _written(db_url)
    with pytest.raises(ComputeHostNotFound, match=f"Compute host {host} could not be found"):
        getattr(api, call)(
            *(_fill(a, world, host) for a in args),
            **{k: _fill(v, world, host) for k, v in kwargs.items()},
        )
    assert _written(db_url) == before


COMMANDS: list[tuple[str, list[str]]] = [
    ("migrate", ["migrate", "$uuid", "--host", "host99", "--wait", "30"]),
    ("boot", ["boot", "vm", "--flavor", "m1", "--availability-zone", "nova:host99"]),
    ("service-disable", ["service-disable", "host99"]),
    ("service-enable", ["service-enable", "host99"]),
    ("service-force-down", ["service-force-down", "host99"]),
    ("aggregate-add-host", ["aggregate-add-host", "$agg", "host99"]),
    ("periodic-run", ["periodic-run", PER_HOST_TASK, "--host", "host99"]),
]


@pytest.mark.parametrize("line", [pytest.param(c[1], id=c[0]) for c in COMMANDS])
def test_a_command_naming_an_unknown_host_says_so_and_writes_nothing(
    db_url: str, world: dict[str, Any], line: list[str]
) -> None:
    before = _written(db_url)
    result = CliRunner().invoke(main, [str(_fill(a, world, "host99")) for a in line])
    assert result.exit_code == 1, result.output
    assert "ComputeHostNotFound" in result.output and "host99" in result.output
    assert _written(db_url) == before
