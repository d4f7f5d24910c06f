"""What the multi-host tests ask of the cloud: servers booted and deleted, where each
guest lives, the audit's findings, what is stuck."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from novaq.exceptions import FlavorExists
from tests.integration.checks import leaks
from workflows import api

FLAVOR = "mh.small"


def flavor() -> str:
    return flavor_of(FLAVOR, 1, 512, 1)


def flavor_of(name: str, vcpus: int, memory_mb: int, root_gb: int) -> str:
    """Flavor ``name``, made unless it exists."""
    with contextlib.suppress(FlavorExists):
        api.create_flavor(name, vcpus, memory_mb, root_gb)
    return name


def boot(name: str, count: int, **kwargs: Any) -> list[str]:
    return api.boot(name, flavor(), "cirros", count=count, **kwargs)


def wait_all(uuids: Iterable[str], status: str, timeout_s: float = 180) -> list[dict[str, Any]]:
    return [api.wait(uuid, status, timeout=timeout_s) for uuid in uuids]


def delete_all(uuids: Iterable[str]) -> None:
    uuids = list(uuids)
    for uuid in uuids:
        api.delete(uuid)
    wait_all(uuids, "DELETED")


def guests(report: dict[str, Any]) -> dict[str, int | None]:
    """Each node's guest count as its hypervisor reported it (None: it did not answer)."""
    result: dict[str, int | None] = {}
    for node in report["nodes"]:
        hypervisor = node["usage"]["hypervisor"]
        result[node["host"]] = None if hypervisor is None else int(hypervisor["guests"])
    return result


def audit_clean(hosts: Iterable[str]) -> dict[str, Any]:
    """The audit of ``hosts``, which must find no leak and hear from every host."""
    hosts = list(hosts)
    report = api.audit(timeout=30, hosts=hosts)
    assert leaks(report, hosts) == []
    assert None not in guests(report).values(), guests(report)
    return report


def stuck() -> list[tuple[str, str, str | None]]:
    """Servers still in a task (name, status, task_state), none expected at rest."""
    return [
        (s["name"], s["status"], s["task_state"])
        for s in api.list_instances()
        if s["task_state"] is not None
    ]


def queue_length(name: str) -> int:
    """Messages waiting in queue ``name`` on the broker (Redis or RabbitMQ)."""
    from amqp.exceptions import ChannelError

    from tasks import app

    with app.connection_for_write() as connection:
        try:
            declared = connection.default_channel.queue_declare(queue=name, passive=True)
        except ChannelError as exc:
            if str(exc.reply_code) != "404":  # NOT_FOUND: Redis keeps no empty list
                raise
            return 0
        return int(declared.message_count)


def service_up(host: str) -> bool:
    [service] = [
        s for s in api.list_services() if s["binary"] == "novaq-compute" and s["host"] == host
    ]
    return bool(service["up"])
