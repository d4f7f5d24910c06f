"""RequestSpec and Selection: pure data handed between the API, the scheduler and the
compute hosts (JSON-friendly, never ORM objects)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from compute.claims import ResourceRequest
from compute.pci import PciRequest


@dataclass(frozen=True, slots=True)
class RequestSpec:
    instance_uuid: str
    flavor: dict[str, Any]
    # The image's id and, from the registry at boot, its name and properties (what
    # ImagePropertiesFilter and IsolatedHostsFilter read).
    image: str = ""
    availability_zone: str | None = None
    hints: dict[str, Any] = field(default_factory=dict)
    group: str | None = None
    num_instances: int = 1
    ignore_hosts: tuple[str, ...] = ()
    pci_requests: tuple[PciRequest, ...] = ()
    image_properties: dict[str, str] = field(default_factory=dict)
    image_name: str = ""
    force_hosts: tuple[str, ...] = ()
    requested_host: str | None = None
    # Filled by the scheduler from the database at decision time (Nova's instance_group):
    # {"uuid", "name", "policy", "rules": {"max_server_per_host": 1}, "members": [uuids],
    #  "hosts": [hosts of the members]}
    instance_group: dict[str, Any] | None = None
    # Computed once: filters ask for it for every host.
    _resources: ResourceRequest | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_resources", ResourceRequest.from_flavor(self.flavor, self.pci_requests)
        )

    @property
    def resources(self) -> ResourceRequest:
        assert self._resources is not None
        return self._resources

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["_resources"]
        data["ignore_hosts"] = list(self.ignore_hosts)
        data["force_hosts"] = list(self.force_hosts)
        data["pci_requests"] = [r.to_dict() for r in self.pci_requests]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestSpec:
        data = dict(data)
        data["ignore_hosts"] = tuple(data.get("ignore_hosts", ()))
        data["force_hosts"] = tuple(data.get("force_hosts", ()))
        data["pci_requests"] = tuple(PciRequest.from_dict(r) for r in data.get("pci_requests", ()))
        return cls(**data)


@dataclass(frozen=True, slots=True)
class Selection:
    """A chosen, already claimed destination, plus the alternates for a reschedule."""

    host: str
    nodename: str
    compute_node_id: int
    alternates: tuple[tuple[str, str, int], ...] = ()
    instance_uuid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_uuid": self.instance_uuid,
            "host": self.host,
            "nodename": self.nodename,
            "compute_node_id": self.compute_node_id,
            "alternates": [list(a) for a in self.alternates],
        }
