"""JsonFilter: with the ``query`` hint (a JSON text, ``scheduler.filters.json_query``),
only hosts for which the query is true, e.g. ``["and", [">=", "$free_ram_mb", 1024],
[">=", "$free_disk_mb", 204800]]``. A query whose value is a list (``["not", ...]`` at the
top) passes a host if any of its items is true.

``$name`` reads the attributes of Nova's ``HostState`` by Nova's names and with Nova's
values and types (``ATTRIBUTES``): the scalars (``free_ram_mb``, ``vcpus_used``,
``host_ip``, ...) and the dictionaries ``$stats.<key>`` (values as text, as Nova's
compute node stats), ``$service.disabled`` and ``$limits``. What only Nova has an object
for (``pci_stats``, ``updated``, ``allocation_candidates``, ``metrics``) is an opaque
stand-in: true (metrics: only when the node reports some, as Nova's list), equal to
nothing else, not ordered, with no keys, which is all a JSON query can tell of Nova's objects.
Differences: ``cell_uuid`` is novaq's one cell's name (``cell1``), ``numa_topology`` is
always None (novaq records none), ``$service`` has only ``host``, ``binary``, ``topic``
and ``disabled``, ``$instances.<uuid>`` has only ``uuid``, and the host state's methods
and Python internals (``$update``, ``$__dict__``) are not reachable.

Where Nova's filter raises (text that is not a query, an unknown operator, ``<`` between
a number and a string, ``.key`` on a number; the whole request fails in Nova), novaq's
refuses that host, and the API refuses a query that is not one before anything is written
(``json_query.check_query``). A query Nova's filter evaluates wrongly is refused by the
API too: a JSON string at the top, whose characters Nova reads as a query.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from models.host_mapping import DEFAULT_CELL
from scheduler.filters import json_query
from scheduler.filters.base import BaseFilter
from scheduler.filters.compute_capabilities_filter import NOVA_ATTRIBUTES
from scheduler.filters.utils import hint_value
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

HINT = "query"
INSTANCES = "$instances"
STATS = "$stats"


class Opaque:
    """A stand-in for a Nova object a query can only test for truth or identity."""

    __slots__ = ("name", "truth")

    def __init__(self, name: str, truth: bool = True) -> None:
        self.name, self.truth = name, truth

    def __bool__(self) -> bool:
        return self.truth

    def __repr__(self) -> str:
        return f"<{self.name}>"


class Instant(Opaque):
    """The stand-in of Nova's ``updated`` (a datetime): ordered against itself only."""

    __slots__ = ()

    def __lt__(self, other: object) -> bool:
        return self._same(other) and False

    def __gt__(self, other: object) -> bool:
        return self._same(other) and False

    def __le__(self, other: object) -> bool:
        return self._same(other)

    def __ge__(self, other: object) -> bool:
        return self._same(other)

    def _same(self, other: object) -> bool:
        if other is not self:
            raise TypeError(f"{self!r} is ordered against itself only")
        return True


class InstanceRef:
    """An instance of ``$instances`` as Nova's host state holds it: only its uuid set."""

    __slots__ = ("uuid",)

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid

    def get(self, key: str, default: Any = None) -> Any:
        return self.uuid if key == "uuid" else default


PCI_STATS = Opaque("PciDeviceStats")
UPDATED = Instant("updated_at")
NO_METRICS = Opaque("MonitorMetricList", truth=False)
SOME_METRICS = Opaque("MonitorMetricList")
ALLOCATION_CANDIDATES = (Opaque("allocation candidate"),)


def _stats(host: HostState) -> dict[str, str | None]:
    # Nova's compute node stats are a dict of strings.
    return {k: None if v is None else str(v) for k, v in host.stats.items()}


def _service(host: HostState) -> dict[str, Any]:
    return {
        "host": host.host,
        "binary": "nova-compute",
        "topic": "compute",
        "disabled": host.service_disabled,
    }


#: ``$name`` → its value on a host: Nova's HostState attributes.
ATTRIBUTES: dict[str, Callable[[HostState], Any]] = {
    **NOVA_ATTRIBUTES,
    "uuid": lambda h: h.uuid or None,
    "_lock_name": lambda h: f"{h.host}-{h.nodename}",
    "host_ip": lambda h: h.host_ip,  # the address object, not the capability's text
    "stats": _stats,
    "service": _service,
    "limits": lambda h: {},
    "aggregates": lambda h: list(h.aggregates),
    "instances": lambda h: {uuid: InstanceRef(uuid) for uuid in h.instances},
    "pci_stats": lambda h: PCI_STATS,
    "numa_topology": lambda h: None,
    # Nova's MonitorMetricList: true once the node reports any metric.
    "metrics": lambda h: SOME_METRICS if h.metrics else NO_METRICS,
    "cell_uuid": lambda h: DEFAULT_CELL,
    "updated": lambda h: UPDATED,
    "allocation_candidates": lambda h: ALLOCATION_CANDIDATES,
}


class JsonFilter(BaseFilter):
    #: ``$instances`` reads the instance uuids (loaded only for a query naming them).
    reads_instances: ClassVar[bool] = True

    def ignores(self, spec: RequestSpec) -> bool:
        return not hint_value(spec, HINT)

    def needs_instances(self, spec: RequestSpec) -> bool:
        text = hint_value(spec, HINT)
        return isinstance(text, str) and INSTANCES in text

    def reads_stats(self, spec: RequestSpec) -> bool:
        # ``$stats.num_vm_active`` and the like: the instance counts, loaded only then.
        text = hint_value(spec, HINT)
        return isinstance(text, str) and STATS in text

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        text = hint_value(spec, HINT)
        if not text:
            return True
        try:
            query = json_query.parsed(text)
            result = json_query.evaluate(query, lambda name: _attribute(host, name))
        except (ValueError, TypeError, AttributeError) as exc:
            LOG.debug("%s: query %r fails: %s: %s", host.host, text, type(exc).__name__, exc)
            return False
        if isinstance(result, list):
            return any(result)
        return bool(result)


def _attribute(host: HostState, name: str) -> Any:
    read = ATTRIBUTES.get(name)
    return None if read is None else read(host)
