"""The whole-list paths of the weighers: ``weigh_all`` gives what ``weigh`` gives host by
host, and ``weigh_hosts`` asks a multiplier once for all the hosts in no aggregate."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from novaq.settings import Settings
from scheduler.host_state import AggregateInfo, HostState
from scheduler.request_spec import InstanceGroup, RequestSpec
from scheduler.weights import _registry, load_weighers, weigh_hosts
from scheduler.weights.ram import RAMWeigher

Host = Callable[..., HostState]
MEMBER = "00000000-0000-4000-8000-00000000000b"


def _hosts(make_host: Host, make_aggregate: Callable[..., AggregateInfo]) -> list[HostState]:
    return [
        make_host("idle"),
        make_host("busy", memory_mb_used=6000, vcpus_used=7, local_gb_used=90, num_io_ops=3),
        make_host("over", vcpus_used=12, failed_builds=2),
        make_host("gpu", pci_pools={("10de", "13f1", "type-PCI"): 3}),
        make_host("member", instances={MEMBER}),
        make_host("agg", aggregates=(make_aggregate({"ram_weight_multiplier": "2"}, ["agg"]),)),
    ]


@pytest.mark.parametrize("name", sorted(_registry()))
@pytest.mark.parametrize("policy", ["", "soft-affinity", "soft-anti-affinity"])
def test_weigh_all_is_weigh_of_each_host(
    name: str, policy: str, make_host: Host, make_aggregate, make_spec
) -> None:
    (weigher,) = load_weighers(Settings(), [name])
    group = InstanceGroup(uuid="g", policy=policy, members=(MEMBER,)) if policy else None
    spec: RequestSpec = make_spec(instance_group=group)
    hosts = _hosts(make_host, make_aggregate)
    assert weigher.weigh_all(hosts, spec) == [weigher.weigh(h, spec) for h in hosts]
    if weigher.ignores(spec):
        assert len(set(weigher.weigh_all(hosts, spec))) == 1


def test_a_multiplier_is_asked_once_for_the_hosts_in_no_aggregate(
    make_host: Host, make_aggregate, make_spec
) -> None:
    asked: list[str] = []

    class Counting(RAMWeigher):
        def multiplier(self, host: HostState) -> float:
            asked.append(host.host)
            return super().multiplier(host)

    hosts = _hosts(make_host, make_aggregate)
    weighed = weigh_hosts([Counting(Settings())], hosts, make_spec())
    assert sorted(asked) == ["agg", "idle"]
    # The aggregate's multiplier (2) still applies to its host: 2 * 1.0 beats 1 * 1.0.
    assert [h.host for _, h in weighed][:2] == ["agg", "idle"]
