"""What the bad-input tables share (issue 14, items 8 and 9): the world the bad requests
are aimed at, the state a refused request must leave as it was, and the command-line cases."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from models import (
    Aggregate,
    AggregateMetadata,
    Flavor,
    FlavorExtraSpec,
    Instance,
    InstanceAction,
    InstanceMetadata,
    Migration,
    ServerGroup,
    Service,
)
from models.db import session_scope
from tests.factories import flavor_dict
from tests.unit.workflows.servers import placed_server, queued
from workflows import api

QUEUES = ("scheduler", "compute.host1")
#: The server the moves and locks are asked about: flavor root_gb 4, ephemeral 2.
CURRENT = flavor_dict(2, 1024, 4, ephemeral_gb=2)
BIG = "x" * (10 * 2**20)  # a 10 MB value, as measured in the issue
LONG = "n" * 256  # one more than Nova's 255


def state(db_url: str) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    with session_scope(db_url) as session:
        counts = tuple(
            int(session.scalar(select(func.count()).select_from(m)) or 0)
            for m in (
                Aggregate,
                AggregateMetadata,
                Flavor,
                FlavorExtraSpec,
                Instance,
                InstanceAction,
                InstanceMetadata,
                Migration,
                ServerGroup,
            )
        )
        services = tuple(
            (s.host, s.disabled, s.disabled_reason, s.forced_down)
            for s in session.scalars(select(Service).order_by(Service.id))
        )
        instances = tuple(
            (
                i.display_name,
                i.description,
                i.vm_state,
                i.task_state,
                dict(i.system_metadata or {}),
            )
            for i in session.scalars(select(Instance).order_by(Instance.id))
        )
    return counts, services, instances, queued(*QUEUES)


def make_world(db_url: str) -> dict[str, Any]:
    """host1 up with one ACTIVE server on it, a flavor, an aggregate: what the bad
    requests are aimed at."""
    uuid = placed_server(db_url, "active", flavor=CURRENT)
    api.create_flavor("m1", 1, 512, 1)
    api.create_flavor("small-disk", 4, 2048, 1, ephemeral_gb=2)
    aggregate = api.create_aggregate("agg")
    return {"uuid": uuid, "aggregate": aggregate["id"]}


def fill(value: Any, world: dict[str, Any]) -> Any:
    return (
        {"$uuid": world["uuid"], "$agg": world["aggregate"]}.get(value, value)
        if isinstance(value, str)
        else value
    )


#: (id, command line, words the error must hold). ``$uuid``/``$agg`` as above.
CLI_CASES: list[tuple[str, list[str], str]] = [
    ("boot-name-esc", ["boot", "\x1b[2Jvm", "--flavor", "m1"], "server name"),
    ("boot-name-rtl", ["boot", "vm\u202e", "--flavor", "m1"], "server name"),
    ("boot-name-long", ["boot", LONG, "--flavor", "m1"], "server name"),
    ("boot-count-huge", ["boot", "vm", "--flavor", "m1", "--min-count", str(10**30)], "count"),
    (
        "boot-forced-host",
        ["boot", "vm", "--flavor", "m1", "--availability-zone", "nova:nohost"],
        "nohost",
    ),
    (
        "flavor-vcpus-huge",
        ["flavor-create", "m2", "--vcpus", str(10**30), "--ram", "1", "--disk", "1"],
        "vcpus",
    ),
    (
        "flavor-name-nl",
        ["flavor-create", "m\n2", "--vcpus", "1", "--ram", "1", "--disk", "1"],
        "flavor name",
    ),
    (
        "flavor-unknown-operator",
        [
            "flavor-create",
            "m2",
            "--vcpus",
            "1",
            "--ram",
            "1",
            "--disk",
            "1",
            "--property",
            "capabilities:vcpus==> 4",
        ],
        "extra spec",
    ),
    (
        "flavor-missing-operand",
        [
            "flavor-create",
            "m2",
            "--vcpus",
            "1",
            "--ram",
            "1",
            "--disk",
            "1",
            "--property",
            "capabilities:vcpus=>=",
        ],
        "extra spec",
    ),
    (
        "flavor-unknown-hw-name",
        [
            "flavor-create",
            "m2",
            "--vcpus",
            "1",
            "--ram",
            "1",
            "--disk",
            "1",
            "--property",
            "hw:cpu_polcy=dedicated",
        ],
        "hw:cpu_polcy",
    ),
    ("aggregate-zone-colon", ["aggregate-create", "a2", "az:1"], "availability_zone"),
    ("aggregate-name-esc", ["aggregate-create", "a\x1b2"], "aggregate name"),
    (
        "metadata-zone-colon",
        ["aggregate-set-metadata", "$agg", "availability_zone=az:1"],
        "availability_zone",
    ),
    ("group-name-nl", ["server-group-create", "g\n", "affinity"], "server group name"),
    ("disable-reason-long", ["service-disable", "host1", "--reason", LONG], "reason"),
    ("disable-reason-esc", ["service-disable", "host1", "--reason", "\x1b[5m"], "reason"),
    ("migrate-host-unknown", ["migrate", "$uuid", "--host", "nohost"], "nohost"),
    ("resize-disk-down", ["resize", "$uuid", "small-disk"], "disk"),
    ("lock-reason-rtl", ["lock", "$uuid", "--reason", "\u202eevil"], "reason"),
]
