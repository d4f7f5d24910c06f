"""Nova's extra-spec namespaces at the door (issue 14, item 8): a key in a namespace Nova
validates must be a name Nova knows there (refused naming the key, nothing written); a
key with no namespace, or in one Nova does not validate, is accepted as Nova accepts it."""

from __future__ import annotations

import pytest

from novaq.exceptions import InvalidInput
from workflows import api
from workflows.api.extra_specs import name_problem

KNOWN = [
    "hw:cpu_policy",
    "hw:numa_cpus.0",
    "hw:numa_mem.12",
    "hw_rng:allowed",
    "hw_video:ram_max_mb",
    "capabilities:vcpus",
    "capabilities:cpu_info:arch",
    "capabilities:cpu_info:topology:sockets",
    "aggregate_instance_extra_specs:ssd",
    "pci_passthrough:alias",
    "resources:VCPU",
    "resources1:CUSTOM_GPU",
    "resources_gpu:PCPU",
    "trait:HW_CPU_X86_AVX2",
    "trait1:CUSTOM_FAST",
    "quota:cpu_shares",
    "quota:disk_read_iops_sec",
    "quota:vif_outbound_burst",
    "os:secure_boot",
    "accel:device_profile",
    "vmware:storage_policy",
]
#: Namespaces Nova does not validate (powervm's went with its driver), and no namespace.
UNCHECKED = ["gpu:1", "powervm:proc_units", "custom:anything:at:all", "hide_hypervisor_id"]
UNKNOWN = [
    "hw:cpu_polcy",
    "hw:numa_cpus.x",
    "capabilities:no_such_thing",
    "capabilities:cpu_flags:vendor",
    "resources:vcpu",
    "trait:lower",
    "quota:cpu",
    "os:other",
    "pci_passthrough:aliases",
]


@pytest.mark.parametrize("key", KNOWN + UNCHECKED)
def test_a_name_nova_knows_or_does_not_check_is_accepted(key: str) -> None:
    assert name_problem(key) is None


@pytest.mark.parametrize("key", UNKNOWN)
def test_a_name_nova_does_not_know_in_its_namespace_is_refused(key: str) -> None:
    assert name_problem(key) is not None


def test_the_api_refuses_the_key_by_name_and_keeps_the_others(db_url: str) -> None:
    with pytest.raises(InvalidInput, match="extra spec key 'hw:cpu_polcy' must be a name"):
        api.create_flavor("m2", 1, 512, 1, extra_specs={"hw:cpu_polcy": "dedicated"})
    assert api.list_flavors() == []
    specs = {"hw:cpu_policy": "dedicated", "gpu:1": "x", "capabilities:vcpus": ">= 2"}
    assert api.create_flavor("m2", 1, 512, 1, extra_specs=specs)["extra_specs"] == specs
