"""The scheduler's payloads keep one type on every path: alternates are ``Alternate``s
from the scheduler to the reschedule loop (JSON lists only on the wire), a server group is
an ``InstanceGroup`` whether it came from the database or a serialised request."""

from __future__ import annotations

import json

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
