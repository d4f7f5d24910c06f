"""RequestSpec and Selection: pure data handed between the API, the scheduler and the
compute hosts (JSON-friendly, never ORM objects)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from compute.claims import ResourceRequest
from compute.pci import PciRequest
from models.alternate import Alternate, dump_alternates, load_alternates
from models.flavor import FlavorSnapshot
from models.instance import DEFAULT_PROJECT_ID, DEFAULT_USER_ID


@dataclass(frozen=True, slots=True)
class InstanceGroup:
    """A server group as the scheduler sees it at decision time (Nova's instance_group):
    its policy and rules, its members and the hosts they are on."""

    uuid: str = ""
    name: str = ""
    policy: str = ""
    rules: dict[str, Any] = field(default_factory=dict)
    members: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()

    @property
    def max_server_per_host(self) -> int:
        """Anti-affinity's limit per host (Nova's rule; 1 unless the group says)."""
        return int(self.rules.get("max_server_per_host", 1))

    def with_host(self, host: str) -> InstanceGroup:
        """The group once a member was placed on ``host`` (the next instance of the same
        request sees it)."""
        return replace(self, hosts=tuple(sorted({*self.hosts, host})))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["members"], data["hosts"] = list(self.members), list(self.hosts)
        return data

    @classmethod
    def load(cls, data: InstanceGroup | Mapping[str, Any]) -> InstanceGroup:
        """From its dict form (keys left out take their defaults), or as it is."""
        if isinstance(data, InstanceGroup):
            return data
        return cls(
            uuid=str(data.get("uuid", "")),
            name=str(data.get("name", "")),
            policy=str(data.get("policy", "")),
            rules=dict(data.get("rules") or {}),
            members=tuple(data.get("members") or ()),
            hosts=tuple(data.get("hosts") or ()),
        )


@dataclass(frozen=True, slots=True)
class RequestSpec:
    instance_uuid: str
    flavor: FlavorSnapshot
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
    # Filled by the scheduler from the database at decision time (Nova's instance_group).
    instance_group: InstanceGroup | None = None
    # The server's owner (Nova's spec.project_id/user_id): AggregateMultiTenancyIsolation
    # reads the project. A spec stored before servers had owners reads as the demo ones,
    # which is what the migration gave those servers.
    project_id: str = DEFAULT_PROJECT_ID
    user_id: str = DEFAULT_USER_ID
    # A move's preferred cell, and whether it may leave it (Nova's requested_destination
    # cell and allow_cross_cell_move): only CrossCellWeigher reads them.
    requested_cell: str | None = None
    allow_cross_cell_move: bool = False
    # Computed once: filters ask for it for every host.
    _resources: ResourceRequest | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # One type on every path: a flavor given in its stored form becomes a snapshot.
        object.__setattr__(self, "flavor", FlavorSnapshot.load(self.flavor))
        if self.instance_group is not None:
            object.__setattr__(self, "instance_group", InstanceGroup.load(self.instance_group))
        object.__setattr__(
            self, "_resources", ResourceRequest.from_flavor(self.flavor, self.pci_requests)
        )

    @property
    def resources(self) -> ResourceRequest:
        assert self._resources is not None
        return self._resources

    def to_dict(self) -> dict[str, Any]:
        # NOTE: not ``asdict``, which deep-copied the flavor snapshot (a pydantic model)
        # only to have it replaced by its dump: about a tenth of ``api.boot``. Each field
        # is converted once, in field order: the flavor, hosts, PCI requests and group by
        # their own dumps, the JSON of hints and image properties deeply copied (as
        # ``asdict`` copies it), plain values as they are.
        group = self.instance_group
        return {
            "instance_uuid": self.instance_uuid,
            "flavor": self.flavor.dump(),
            "image": self.image,
            "availability_zone": self.availability_zone,
            "hints": copy.deepcopy(self.hints),
            "group": self.group,
            "num_instances": self.num_instances,
            "ignore_hosts": list(self.ignore_hosts),
            "pci_requests": [r.to_dict() for r in self.pci_requests],
            "image_properties": copy.deepcopy(self.image_properties),
            "image_name": self.image_name,
            "force_hosts": list(self.force_hosts),
            "requested_host": self.requested_host,
            "instance_group": group.to_dict() if group is not None else None,
            "project_id": self.project_id,
            "user_id": self.user_id,
            "requested_cell": self.requested_cell,
            "allow_cross_cell_move": self.allow_cross_cell_move,
        }

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
    alternates: tuple[Alternate, ...] = ()
    instance_uuid: str | None = None

    def __post_init__(self) -> None:
        # One type on every path: plain triples given here become Alternates.
        object.__setattr__(self, "alternates", load_alternates(self.alternates))

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_uuid": self.instance_uuid,
            "host": self.host,
            "nodename": self.nodename,
            "compute_node_id": self.compute_node_id,
            "alternates": dump_alternates(self.alternates),
        }
