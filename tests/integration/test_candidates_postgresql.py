"""The scheduler's candidate query on real PostgreSQL, where it differs from SQLite: the
capacity pre-filter is one ``least(...)`` comparison there (``scheduler.candidate_sql``)
and must keep exactly the nodes placement's three checks keep, in id order, up to the
limit; the service state the database computes is the servicegroup's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import delete, update

from compute.claims import ResourceRequest, node_capacity
from compute.servicegroup import COMPUTE, is_up
from models import Allocation, ComputeNode, Service
from models.db import session_scope
from scheduler.candidates import load_candidates
from tests.factories import make_compute_node, make_settings

pytestmark = pytest.mark.integration

# (vCPUs used, MB used, GB used) per node, on nodes of 8 vCPUs x 4.0, 8 GB and 100 GB.
# The last node's disk is overcommitted past its capacity (130 of 100 GB).
USAGE = [
    (0, 512, 0),
    (31, 512, 0),
    (0, 8192, 0),
    (0, 512, 99),
    (30, 7000, 90),
    (4, 4096, 50),
    (0, 512, 130),
]


@pytest.fixture
def nodes(services: str) -> Iterator[list[int]]:
    settings = make_settings(cpu_allocation_ratio=4.0)
    ids = []
    for index, (vcpus, memory, disk) in enumerate(USAGE):
        host = f"pg-candidate-{index}"
        node_id = make_compute_node(
            services, host, settings=settings, vcpus=8, memory_mb=8192, local_gb=100
        )
        with session_scope(services) as session:
            session.execute(
                update(ComputeNode)
                .where(ComputeNode.id == node_id)
                .values(vcpus_used=vcpus, memory_mb_used=memory, local_gb_used=disk)
            )
        ids.append(node_id)
    with session_scope(services) as session:
        session.execute(
            update(Service).where(Service.host == "pg-candidate-5").values(disabled=True)
        )
    yield ids
    with session_scope(services) as session:
        session.execute(delete(Allocation).where(Allocation.compute_node_id.in_(ids)))
        session.execute(delete(ComputeNode).where(ComputeNode.id.in_(ids)))
        session.execute(delete(Service).where(Service.host.like("pg-candidate-%")))


def _fits(node: ComputeNode, request: ResourceRequest) -> bool:
    capacity = node_capacity(node)
    used = {
        "VCPU": node.vcpus_used - node.reserved_vcpus,
        "MEMORY_MB": node.memory_mb_used - node.reserved_memory_mb,
        "DISK_GB": node.local_gb_used - node.reserved_disk_gb,
    }
    # Placement checks only the classes asked for: a root_gb=0 request has no DISK_GB.
    return all(capacity[rc] - used[rc] >= n for rc, n in request.as_resources().items() if n > 0)


@pytest.mark.parametrize("limit", [1, 2, 1000])
@pytest.mark.parametrize(
    "request_",
    [
        ResourceRequest(1, 512, 1),
        ResourceRequest(2, 1024, 2),
        ResourceRequest(8, 8192, 100),
        ResourceRequest(1, 512, 0),
    ],
)
def test_the_prefilter_keeps_what_placement_would(
    services: str, nodes: list[int], request_: ResourceRequest, limit: int
) -> None:
    settings = make_settings()
    settings = settings.model_copy(
        update={"scheduler": settings.scheduler.model_copy(update={"max_placement_results": limit})}
    )
    with session_scope(services) as session:
        # Every node of the database counts towards the limit, the cluster's too.
        rows = {n.id: n for n in session.query(ComputeNode).filter(ComputeNode.deleted == 0)}
        enabled = {
            s.host
            for s in session.query(Service).filter(
                Service.binary == COMPUTE, Service.deleted == 0, Service.disabled.is_(False)
            )
        }
        expected = [
            i for i in sorted(rows) if rows[i].host in enabled and _fits(rows[i], request_)
        ][:limit]
        got = [h.compute_node_id for h in load_candidates(session, settings, request_).hosts]
    assert got == expected


def test_service_state_is_the_servicegroup_s(services: str, nodes: list[int]) -> None:
    settings = make_settings()
    with session_scope(services) as session:
        session.execute(
            update(Service).where(Service.host == "pg-candidate-1").values(forced_down=True)
        )
    with session_scope(services) as session:
        states = {h.host: h for h in load_candidates(session, settings).hosts}
        for service in session.query(Service).filter(Service.host.like("pg-candidate-%")):
            assert states[service.host].service_up == is_up(service, settings)
            assert states[service.host].service_disabled == service.disabled
    assert not states["pg-candidate-1"].service_up and states["pg-candidate-5"].service_disabled
