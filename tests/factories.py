"""Plain builders of rows and value objects for tests (no mocks)."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import subprocess
import uuid as uuid_module
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from compute import claims
from compute.claims import ResourceRequest, retry_on_conflict, write_usage
from compute.resource_tracker import record_compute_node
from compute.servicegroup import COMPUTE, register_service
from compute.sessions import sessions_for
from compute.states import TaskState, VmState
from models import (
    Base,
    ComputeNode,
    Image,
    ImageStatus,
    Instance,
    Migration,
    Service,
    ServiceLiveness,
    liveness,
)
from models.db import get_engine, liveness_write, session_scope
from models.pci_device import ALLOCATED
from models.pci_device import PciDevice as PciDeviceRow
from models.states import MIGRATION_TRANSITIONS, MigrationStatus
from novaq.settings import Settings
from scheduler.request_spec import RequestSpec
from tests.costs import listening
from virt.driver import HostResources, PciDevice


def reset_database(db_url: str) -> None:
    with session_scope(db_url) as session:
        for table in reversed(Base.metadata.sorted_tables):
            if table.schema != liveness.SCHEMA:  # (on SQLite attached read-only)
                session.execute(delete(table))
    liveness_write(db_url, delete(ServiceLiveness))


def set_last_seen_up(db_url: str, when: dt.datetime | None, host: str | None = None) -> None:
    """Stamp the last heartbeat of ``host``'s services (every service's when None) at
    ``when``, as their heartbeats would (``models.liveness``)."""
    with session_scope(db_url, read_only=True) as session:
        query = select(Service.id)
        ids = session.scalars(query if host is None else query.where(Service.host == host)).all()
    of_them = ServiceLiveness.service_id.in_(ids)
    liveness_write(db_url, update(ServiceLiveness).where(of_them).values(last_seen_up=when))


# -- images ----------------------------------------------------------------------------------

# The image every test server boots from: registered as "cirros" wherever a test database
# is set up, with a fixed id so tests can name it.
CIRROS_ID = "c1a5c1a5-0000-4000-8000-000000000001"
TINY_IMAGE_BYTES = 1024 * 1024


def write_raw_image(path: Path, size: int = TINY_IMAGE_BYTES) -> Path:
    """A raw disk image of ``size`` zero bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
    return path


def write_qcow2_image(path: Path, virtual_size: str = "1M") -> Path:
    """A tiny qcow2 image (``qemu-img create``) of ``virtual_size``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", str(path), virtual_size],
        check=True,
        timeout=60,
    )
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_image(db_url: str, data: Path, **overrides: Any) -> str:
    """An active raw image row whose data is ``data`` (already in place; nothing is
    copied), as ``api.create_image`` records it. Returns its id."""
    values: dict[str, Any] = dict(
        id=str(uuid_module.uuid4()),
        name="cirros",
        disk_format="raw",
        container_format="bare",
        status=ImageStatus.ACTIVE,
        size=data.stat().st_size,
        virtual_size=data.stat().st_size,
        os_hash_algo="sha256",
        os_hash_value=sha256_of(data),
        min_disk=0,
        min_ram=0,
        properties={},
        location=str(data.resolve()),
    )
    values.update(overrides)
    with session_scope(db_url) as session:
        session.add(Image(**values))
    return str(values["id"])


def register_cirros(db_url: str, store: Path) -> str:
    """The "cirros" test image (1 MiB of raw zeros) in ``store`` and in the database."""
    data = store / CIRROS_ID
    if not data.is_file():
        write_raw_image(data)
    return make_image(db_url, data, id=CIRROS_ID)


def make_image_ref(db_url: str, ref: str) -> str:
    """An image whose id and name are both ``ref`` (a readable id for tests that name
    images), sharing the "cirros" test data; none is added if it exists."""
    from novaq.settings import get_settings

    with session_scope(db_url) as session:
        if session.get(Image, ref) is not None:
            return ref
    return make_image(db_url, get_settings().image_store_path / CIRROS_ID, id=ref, name=ref)


def make_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)


GPU_VENDOR, GPU_PRODUCT = "10de", "13f1"
GPU_ALIAS = "QuadroM4000-video"


def gpu_settings(**overrides: Any) -> Settings:
    """Settings that pass through and name the Quadro M4000 GPUs of the demo hosts."""
    pci = {
        "alias": [{"name": GPU_ALIAS, "vendor_id": GPU_VENDOR, "product_id": GPU_PRODUCT}],
        "device_spec": [{"vendor_id": GPU_VENDOR, "product_id": GPU_PRODUCT}],
    }
    return Settings(pci=pci, **overrides)


def gpus(*addresses: str) -> tuple[PciDevice, ...]:
    return tuple(PciDevice(a, GPU_VENDOR, GPU_PRODUCT, None) for a in addresses)


def host_resources(
    name: str = "node1",
    vcpus: int = 16,
    memory_mb: int = 32768,
    local_gb: int = 500,
    pci_devices: tuple[PciDevice, ...] = (),
) -> HostResources:
    return HostResources(
        hypervisor_hostname=name,
        vcpus=vcpus,
        memory_mb=memory_mb,
        local_gb=local_gb,
        hypervisor_type="TEST",
        hypervisor_version=1,
        cpu_info={"arch": "x86_64"},
        pci_devices=pci_devices,
    )


def make_compute_node(
    db_url: str,
    host: str = "host1",
    settings: Settings | None = None,
    service: bool = True,
    **sizes: int,
) -> int:
    """A compute node (and its up compute service) as a worker would record it."""
    settings = settings or make_settings()
    with session_scope(db_url) as session:
        if service:
            register_service(session, host, COMPUTE, f"compute.{host}", settings)
        node = record_compute_node(session, host, host_resources(name=host, **sizes), settings)
        write_usage(session, node, node.generation)
        return node.id


def flavor_dict(
    vcpus: int = 1, memory_mb: int = 512, root_gb: int = 1, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "f-" + str(vcpus),
        "name": f"test.{vcpus}",
        "vcpus": vcpus,
        "memory_mb": memory_mb,
        "root_gb": root_gb,
        "ephemeral_gb": extra.get("ephemeral_gb", 0),
        "swap": extra.get("swap", 0),
        "extra_specs": extra.get("extra_specs", {}),
    }


def make_instance(db_url: str, flavor: dict[str, Any] | None = None, **overrides: Any) -> str:
    """A BUILDING/scheduling instance, with its create action, as api.boot writes it."""
    from compute.instance_actions import start_action
    from models import Flavor

    flavor = flavor or flavor_dict()
    uuid = overrides.pop("uuid", str(uuid_module.uuid4()))
    request_id = overrides.pop("request_id", "req-test")
    with session_scope(db_url) as session:
        flavor_row = session.query(Flavor).filter_by(name=flavor["name"]).first()
        if flavor_row is None:
            flavor_row = Flavor(
                flavorid=flavor["id"],
                name=flavor["name"],
                vcpus=flavor["vcpus"],
                memory_mb=flavor["memory_mb"],
                root_gb=flavor["root_gb"],
            )
            session.add(flavor_row)
            session.flush()
        values: dict[str, Any] = dict(
            uuid=uuid,
            display_name="test",
            flavor_id=flavor_row.id,
            flavor=flavor,
            image_ref=CIRROS_ID,
            vcpus=flavor["vcpus"],
            memory_mb=flavor["memory_mb"],
            root_gb=flavor["root_gb"],
            vm_state=VmState.BUILDING,
            task_state=TaskState.SCHEDULING,
            request_spec={},
            system_metadata={},
        )
        values.update(overrides)
        session.add(Instance(**values))
        start_action(session, uuid, "create", request_id)
    return uuid


def add_pci_device(
    db_url: str,
    node_id: int,
    address: str,
    consumer: str | None,
    status: str = ALLOCATED,
    deleted: int = 0,
) -> None:
    """A GPU row on the node (10de:1eb8), held by ``consumer`` when it is not None."""
    with session_scope(db_url) as session:
        session.add(
            PciDeviceRow(
                compute_node_id=node_id,
                address=address,
                vendor_id="10de",
                product_id="1eb8",
                status=status,
                consumer_uuid=consumer,
                instance_uuid=consumer,
                deleted=deleted,
            )
        )


def add_migration(session: Session, instance_uuid: str, **overrides: Any) -> str:
    """A resize of ``instance_uuid`` from host1 as api.resize writes it: pre-migrating, no
    destination picked yet. A node not given is its host's (``source_compute``,
    ``dest_compute``); pass ``None`` for no node."""
    uuid = overrides.pop("uuid", str(uuid_module.uuid4()))
    values: dict[str, Any] = dict(
        uuid=uuid,
        instance_uuid=instance_uuid,
        migration_type="resize",
        status="pre-migrating",
        source_compute="host1",
        dest_compute=None,
    )
    values.update(overrides)
    values.setdefault("source_node", values["source_compute"])
    values.setdefault("dest_node", values["dest_compute"])
    # Created as api.resize creates it, then walked to the status asked for along the
    # transition table (every write of a status is checked).
    wanted = MigrationStatus(values.pop("status"))
    migration = Migration(status=MigrationStatus.PRE_MIGRATING, **values)
    for status in migration_path(MigrationStatus.PRE_MIGRATING, wanted):
        migration.status = status
    session.add(migration)
    return uuid


def set_migration_status(session: Session, migration_uuid: str, status: str) -> None:
    """Move a migration to ``status`` as novaq's writers would: along legal transitions
    (each write checked by the model)."""
    migration = session.scalars(select(Migration).where(Migration.uuid == migration_uuid)).one()
    for step in migration_path(migration.status, MigrationStatus(status)):
        migration.status = step


def rewind_migration_status(session: Session, migration_uuid: str, status: str) -> None:
    """Put a migration back in an earlier ``status``, as if a step's commit had been lost
    (its worker died after acting, before recording). Raw SQL on purpose: no novaq writer
    ever goes backwards, so the transition table refuses it."""
    session.execute(
        text("UPDATE migrations SET status = :status WHERE uuid = :uuid"),
        {"status": str(MigrationStatus(status)), "uuid": migration_uuid},
    )


def migration_path(start: MigrationStatus, goal: MigrationStatus) -> list[MigrationStatus]:
    """The shortest chain of legal transitions from ``start`` to ``goal`` (excluded start)."""
    paths: dict[MigrationStatus, list[MigrationStatus]] = {start: []}
    queue = [start]
    while queue:
        current = queue.pop(0)
        if current == goal:
            return paths[current]
        for nxt in sorted(MIGRATION_TRANSITIONS[current]):
            if nxt not in paths:
                paths[nxt] = [*paths[current], nxt]
                queue.append(nxt)
    raise ValueError(f"no legal path from {start} to {goal}")


def make_migration(db_url: str, instance_uuid: str, **overrides: Any) -> str:
    """``add_migration`` in a transaction of its own."""
    with session_scope(db_url) as session:
        return add_migration(session, instance_uuid, **overrides)


def request_resize(
    db_url: str,
    instance_uuid: str,
    old_flavor: dict[str, Any],
    new_flavor: dict[str, Any],
    source: str,
    request_id: str = "req-test",
    **overrides: Any,
) -> str:
    """A resize of an instance on ``source`` as api.resize requests it (its migration and
    resize action) and the scheduler then places it (a destination other than ``source``
    picked and claimed). Returns the migration's uuid."""
    from compute.instance_actions import start_action
    from scheduler.manager import MoveScheduler, Scheduler

    with session_scope(db_url) as session:
        uuid = add_migration(
            session,
            instance_uuid,
            source_compute=source,
            old_flavor=old_flavor,
            new_flavor=new_flavor,
            request_id=request_id,
            context={"request_spec": {"flavor": old_flavor}},
            **overrides,
        )
        start_action(session, instance_uuid, "resize", request_id)
    spec = spec_for(instance_uuid, new_flavor, ignore_hosts=(source,))
    MoveScheduler(Scheduler(make_settings())).select(sessions_for(db_url), spec, uuid)
    return uuid


def spec_for(uuid: str, flavor: dict[str, Any] | None = None, **kw: Any) -> RequestSpec:
    return RequestSpec(instance_uuid=uuid, flavor=flavor or flavor_dict(), **kw)


def node_row(db_url: str, node_id: int) -> ComputeNode:
    with session_scope(db_url) as session:
        node = session.get(ComputeNode, node_id)
        assert node is not None
        session.expunge(node)
        return node


def claim(db_url: str, node_id: int, consumer_uuid: str, request: ResourceRequest) -> None:
    """Claim ``request`` for ``consumer_uuid`` in its own transaction (retried on a
    generation conflict), as a worker's step does."""
    retry_on_conflict(
        sessions_for(db_url),
        lambda session: claims.claim(session, node_id, consumer_uuid, request),
    )


def release(db_url: str, consumer_uuid: str, node_id: int | None = None) -> int:
    """Release the consumer's allocations in their own transaction (idempotent)."""
    return retry_on_conflict(
        sessions_for(db_url), lambda session: claims.release(session, consumer_uuid, node_id)
    )


@contextlib.contextmanager
def rolled_back(db_url: str) -> Iterator[Session]:
    """A session on one connection whose transaction is rolled back at the end."""
    with get_engine(db_url).connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


@contextlib.contextmanager
def statements_run(db_url: str) -> Iterator[list[str]]:
    """The SQL statements run on ``db_url``'s engines meanwhile (the writers' and, on
    SQLite, the read-only sessions' own); SQLite's BEGIN is the start of a transaction,
    not a statement, and is left out."""
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if not statement.startswith("BEGIN"):
            statements.append(statement)

    with listening(db_url, [("before_cursor_execute", record)]):
        yield statements
