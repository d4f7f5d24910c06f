from __future__ import annotations

import json

import pytest

from novaq.exceptions import InvalidInput
from virt.driver import GuestInfo, GuestSpec, HostResources, PciDevice


def test_guest_spec_round_trips_through_json(gpu_spec: GuestSpec) -> None:
    data = json.loads(json.dumps(gpu_spec.to_dict()))

    assert data["pci_addresses"] == ["0000:08:00.0", "0000:88:00.0"]
    assert GuestSpec.from_dict(data) == gpu_spec


def test_guest_spec_from_dict_defaults_optional_fields() -> None:
    spec = GuestSpec.from_dict(
        {
            "uuid": "6c4ab0a2-8ad5-4bd5-9d9c-1b0b8b0b3f11",
            "name": "a",
            "vcpus": 1,
            "memory_mb": 512,
            "root_gb": 1,
        }
    )
    assert (spec.ephemeral_gb, spec.swap_mb, spec.image, spec.pci_addresses) == (0, 0, None, ())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"uuid": "not-a-uuid"}, "is not a UUID"),
        ({"name": ""}, "name must be"),
        ({"vcpus": 0}, "vcpus must be an integer >= 1"),
        ({"memory_mb": -5}, "memory_mb must be"),
        ({"root_gb": -1}, "root_gb must be an integer >= 0"),
        ({"swap_mb": 1.5}, "swap_mb must be"),
        ({"pci_addresses": ("08:00.0",)}, "PCI address"),
        ({"pci_addresses": ["0000:08:00.0"]}, "must be a tuple"),
        ({"image": "cirros"}, "image must be an ImageSpec"),
    ],
)
def test_guest_spec_rejects_bad_values(
    plain_spec: GuestSpec, overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        GuestSpec(
            **{**plain_spec.to_dict(), "pci_addresses": (), "image": plain_spec.image, **overrides}
        )


def test_host_resources_and_guest_info_are_json(fake_resources: HostResources) -> None:
    info = GuestInfo("u", "n", 1, 2, 512, ("0000:08:00.0",), "<domain/>")

    assert json.loads(json.dumps(fake_resources.to_dict()))["pci_devices"][0] == {
        "address": "0000:08:00.0",
        "vendor_id": "10de",
        "product_id": "13f1",
        "numa_node": None,
        "dev_type": "type-PCI",
    }
    assert json.loads(json.dumps(info.to_dict()))["pci_addresses"] == ["0000:08:00.0"]
    assert PciDevice("0000:08:00.0", "10de", "13f1", 0).dev_type == "type-PCI"
