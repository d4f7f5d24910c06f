"""Image properties read as Nova's ImageMetaProps reads them: which names count, legacy
names, and each field type's coercion (enums canonicalized or refused, booleans,
integers, NUMA and trait keys), spelt back as Nova's ``str()``."""

from __future__ import annotations

import pytest

from scheduler import image_meta_props
from scheduler.image_meta_props import as_text, parse_cpu_spec, read


def test_unknown_properties_are_dropped_and_known_ones_kept() -> None:
    assert read({"os_distro": "debian", "my_own_key": "x", "hw_machine_type": "q35"}) == {
        "os_distro": "debian",
        "hw_machine_type": "q35",
    }


@pytest.mark.parametrize(
    ("name", "given", "held"),
    [
        ("hw_architecture", "amd64", "x86_64"),
        ("hw_architecture", "I386", "i686"),
        ("hw_architecture", "x86_32p", "i686"),
        ("img_hv_type", "xapi", "xen"),
        ("img_hv_type", "QEMU", "qemu"),
        ("hw_vm_mode", "pv", "xen"),
        ("hw_vm_mode", "baremetal", "hvm"),
        ("hw_scsi_model", "LsiLogicSAS", "lsisas1068"),
        ("hw_vif_model", "VirtualE1000", "e1000"),
        ("os_type", "Windows", "windows"),
        ("hw_disk_bus", "virtio", "virtio"),
    ],
)
def test_enums_are_canonicalized_as_nova_does(name: str, given: str, held: str) -> None:
    assert read({name: given}) == {name: held}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("hw_architecture", "x86"),
        ("hw_disk_bus", "VIRTIO"),  # case-sensitive in Nova
        ("hw_video_model", "matrox"),
        ("img_hv_type", "virtuozzo"),  # Nova's name is vz
        ("hw_cpu_cores", "four"),
        ("hw_cpu_cores", "4.0"),
        ("img_hv_requested_version", "8.2"),
        ("img_config_drive", "always"),
        ("img_block_device_mapping", "[]"),  # Nova's modern name takes no text
        ("mappings", "not json"),
        ("hw_numa_mem.0", "lots"),
        ("hw_numa_cpus.0", "3-1"),
        ("vmware_adaptertype", "floppy"),
    ],
)
def test_values_nova_refuses_raise_naming_the_property(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name.split(".")[0]):
        read({name: value})


def test_booleans_are_read_leniently_and_integers_with_int() -> None:
    values = read(
        {
            "hw_qemu_guest_agent": "Yes",
            "hw_pmu": "maybe",
            "img_bdm_v2": " on ",
            "hw_cpu_cores": " 4",
        }
    )
    assert values == {
        "hw_qemu_guest_agent": True,
        "hw_pmu": False,
        "img_bdm_v2": True,
        "hw_cpu_cores": 4,
    }


def test_legacy_names_set_current_ones_and_the_current_name_wins() -> None:
    assert read({"architecture": "amd64"}) == {"hw_architecture": "x86_64"}
    assert read({"architecture": "amd64", "hw_architecture": "aarch64"}) == {
        "hw_architecture": "aarch64"
    }
    assert read({"hypervisor_version_requires": ">= 6.0"}) == {"img_hv_requested_version": ">= 6.0"}
    assert read({"mappings": '[{"virtual": "root", "device": null}]'}) == {
        "img_mappings": [{"virtual": "root", "device": None}]
    }


def test_vmware_adapter_type_sets_the_disk_bus_and_scsi_model() -> None:
    assert read({"vmware_adaptertype": "ide"}) == {"hw_disk_bus": "ide"}
    assert read({"vmware_adaptertype": "paravirtual"}) == {
        "hw_disk_bus": "scsi",
        "hw_scsi_model": "vmpvscsi",
    }


def test_numa_and_trait_keys_become_lists_up_to_the_first_missing_cell() -> None:
    values = read(
        {
            "hw_numa_cpus.0": "0-3,^2",
            "hw_numa_cpus.1": "4,5",
            "hw_numa_cpus.3": "9",
            "hw_numa_mem.0": "1024",
            "trait:HW_CPU_X86_AVX2": "required",
            "trait:HW_CPU_X86_SSE": "forbidden",
        }
    )
    assert values == {
        "hw_numa_cpus": [{0, 1, 3}, {4, 5}],
        "hw_numa_mem": [1024],
        "traits_required": ["HW_CPU_X86_AVX2"],
    }


@pytest.mark.parametrize(
    ("spec", "cpus"),
    [("0-3,^2", {0, 1, 3}), ("^1-2,0-4", {0, 3, 4}), (" 5 , ,7", {5, 7}), ("", set())],
)
def test_cpu_specs_parse_ranges_and_exclusions(spec: str, cpus: set[int]) -> None:
    assert parse_cpu_spec("hw_numa_cpus.0", spec) == cpus


@pytest.mark.parametrize("spec", ["-1", "1-", "a", "^", "3-1", "1--3"])
def test_bad_cpu_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="hw_numa_cpus.0"):
        parse_cpu_spec("hw_numa_cpus.0", spec)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "True"),
        (4, "4"),
        ("x86_64", "x86_64"),
        ([1024, 2048], "[1024, 2048]"),
        (["HW_A"], "['HW_A']"),
        ([{0, 1}, set()], "[CoercedSet({0, 1}), CoercedSet()]"),
        ([{"a": None}], "[{'a': None}]"),
    ],
)
def test_values_are_spelt_as_nova_s_str(value: object, text: str) -> None:
    assert as_text(value) == text


def test_every_field_name_is_read_and_read_items_is_the_same_as_read() -> None:
    assert "traits_required" in image_meta_props.FIELD_NAMES
    assert all(image_meta_props.is_read(n) for n in image_meta_props.FIELDS)
    items = (("architecture", "amd64"), ("os_distro", "x"))
    assert image_meta_props.read_items(items) == read(dict(items))
