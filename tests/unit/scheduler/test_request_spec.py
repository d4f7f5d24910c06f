"""The scheduler's payloads keep one type on every path: alternates are ``Alternate``s
from the scheduler to the reschedule loop (JSON lists only on the wire), a server group is
an ``InstanceGroup`` whether it came from the database or a serialised request."""

from __future__ import annotations

import copy
import json

from compute.pci import PciRequest
from models.alternate import Alternate, dump_alternates, load_alternates
from scheduler.request_spec import InstanceGroup, RequestSpec, Selection
from tests.factories import flavor_dict


def test_alternates_given_as_triples_or_lists_become_alternates() -> None:
    selection = Selection("h1", "n1", 1, (("h2", "n2", 2), ["h3", "n3", "3"]))  # type: ignore[arg-type]
    assert selection.alternates == (Alternate("h2", "n2", 2), Alternate("h3", "n3", 3))
    assert all(isinstance(a, Alternate) for a in selection.alternates)


def test_alternates_cross_the_wire_as_json_lists_and_come_back_the_same() -> None:
    alternates = (Alternate("h2", "n2", 2), Alternate("h3", "n3", 3))
    wire = json.loads(json.dumps(dump_alternates(alternates)))
    assert wire == [["h2", "n2", 2], ["h3", "n3", 3]]
    assert load_alternates(wire) == alternates
    assert load_alternates(None) == ()
    assert Selection("h1", "n1", 1, alternates).to_dict()["alternates"] == wire


def test_an_alternate_unpacks_as_the_triple_it_was() -> None:
    host, node, node_id = Alternate("h2", "n2", 2)
    assert (host, node, node_id) == ("h2", "n2", 2)


def test_a_server_group_round_trips_through_the_request_spec() -> None:
    group = InstanceGroup(
        uuid="g1",
        name="g",
        policy="anti-affinity",
        rules={"max_server_per_host": 2},
        members=("m1", "m2"),
        hosts=("h1",),
    )
    spec = RequestSpec(instance_uuid="i1", flavor=flavor_dict(), instance_group=group)
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["instance_group"]["members"] == ["m1", "m2"]
    assert RequestSpec.from_dict(data).instance_group == group


def test_a_partial_group_dict_is_loaded_with_defaults() -> None:
    spec = RequestSpec(
        instance_uuid="i1", flavor=flavor_dict(), instance_group={"policy": "affinity"}
    )  # type: ignore[arg-type]
    assert spec.instance_group == InstanceGroup(policy="affinity")
    assert spec.instance_group.max_server_per_host == 1


def test_placing_a_member_adds_its_host_once() -> None:
    group = InstanceGroup(policy="affinity", hosts=("h2",))
    assert group.with_host("h1").with_host("h2").hosts == ("h1", "h2")
    assert group.hosts == ("h2",)  # frozen: the original is unchanged


def _reference_dump(spec: RequestSpec) -> dict[str, object]:
    """``to_dict`` as it was written first: every field copied as ``asdict`` copies it,
    then the flavor, hosts, PCI requests and group replaced by their dumps."""
    fields = [name for name in RequestSpec.__dataclass_fields__ if name != "_resources"]
    data = {name: copy.deepcopy(getattr(spec, name)) for name in fields}
    data["flavor"] = spec.flavor.dump()
    data["ignore_hosts"] = list(spec.ignore_hosts)
    data["force_hosts"] = list(spec.force_hosts)
    data["pci_requests"] = [r.to_dict() for r in spec.pci_requests]
    data["instance_group"] = spec.instance_group.to_dict() if spec.instance_group else None
    return data


def test_the_dump_of_a_spec_is_every_field_in_order_and_shares_no_mutable_value() -> None:
    spec = RequestSpec(
        instance_uuid="i1",
        flavor=flavor_dict(),
        image="img",
        availability_zone="az1",
        hints={"same_host": ["a"], "nested": {"k": [1, 2]}},
        group="g1",
        num_instances=2,
        ignore_hosts=("h9",),
        pci_requests=(PciRequest("a1", 2, "8086", "1520", "type-VF"),),
        image_properties={"hw_machine_type": "q35"},
        image_name="cirros",
        force_hosts=("h1",),
        requested_host="h1",
        instance_group=InstanceGroup(uuid="g1", policy="affinity", hosts=("h1",)),
        project_id="p",
        user_id="u",
        requested_cell="c1",
        allow_cross_cell_move=True,
    )
    for each in (spec, RequestSpec(instance_uuid="i2", flavor=flavor_dict())):
        data = each.to_dict()
        assert data == _reference_dump(each)
        assert list(data) == [n for n in RequestSpec.__dataclass_fields__ if n != "_resources"]
        assert json.loads(json.dumps(data)) == data
        assert RequestSpec.from_dict(data) == each
    data = spec.to_dict()
    data["hints"]["nested"]["k"].append(3)
    data["image_properties"]["x"] = "y"
    assert spec.hints == {"same_host": ["a"], "nested": {"k": [1, 2]}}
    assert spec.image_properties == {"hw_machine_type": "q35"}
