"""Nova 34's AggregateImagePropertiesIsolation verdicts and its weighers' raw values and
multipliers, for ``tests/differential/test_image_isolation_and_weighers_agree_with_nova.py``
(runs in the Nova virtualenv of ``scripts/nova-venv``, never in novaq's).

JSON lines on stdin/stdout: ``{"cases": [...]}`` → ``{"answers": [...]}``, one answer per
case of ``tests/differential/image_weigher_cases.py``:
- ``"kind": "filter"`` → true | false | ``"invalid: ..."`` (an image Nova's objects refuse);
- ``"kind": "weighers"`` → ``{"raw": {weigher: [value per host]}, "multipliers": {...}}``
  or ``"invalid: ..."``.

Nova's ImagePropertiesWeigher reads its cell's database: here the cell lookup is answered
from memory and the instances carry their system metadata, so no database is touched. An
instance whose stored image properties Nova cannot read (its weigher would fail the whole
request) is left out of its host, which is what novaq does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sys
from collections.abc import Iterator
from typing import Any

CELL_UUIDS = {
    "cell1": "00000000-0000-4000-8000-0000000000c1",
    "cell2": "00000000-0000-4000-8000-0000000000c2",
}
WEIGHERS = (
    "RAMWeigher",
    "CPUWeigher",
    "DiskWeigher",
    "IoOpsWeigher",
    "BuildFailureWeigher",
    "PCIWeigher",
    "ServerGroupSoftAffinityWeigher",
    "ServerGroupSoftAntiAffinityWeigher",
    "CrossCellWeigher",
    "HypervisorVersionWeigher",
    "ImagePropertiesWeigher",
    "NumInstancesWeigher",
)


def _nova() -> None:
    import nova.conf
    from nova import context, objects
    from nova.scheduler.weights import image_props

    objects.register_all()
    nova.conf.CONF([], project="nova", default_config_files=[])

    def cell_by_uuid(cls: Any, ctxt: Any, uuid: str) -> Any:
        return objects.CellMapping(uuid=uuid, name=uuid, database_connection="", transport_url="")

    @contextlib.contextmanager
    def target_cell(ctxt: Any, cell: Any) -> Iterator[Any]:
        yield ctxt

    objects.CellMapping.get_by_uuid = classmethod(cell_by_uuid)
    image_props.nova_context = type(
        "FakeContext",
        (),
        {
            "get_admin_context": staticmethod(context.get_admin_context),
            "target_cell": staticmethod(target_cell),
        },
    )


def _options(values: dict[str, Any]) -> None:
    import nova.conf

    conf = nova.conf.CONF
    for name, value in values.items():
        conf.set_override(name, value, group="filter_scheduler")


def _host_state(data: dict[str, Any]) -> Any:
    from nova import objects
    from nova.scheduler import host_manager

    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    vcpus, memory, disk = (
        data.get("vcpus", 8),
        data.get("memory_mb", 8192),
        data.get("local_gb", 100),
    )
    pools = [
        objects.PciDevicePool(vendor_id=v, product_id=p, numa_node=0, tags={"dev_type": t}, count=c)
        for v, p, t, c in data.get("pci_pools", ())
    ]
    compute = objects.ComputeNode(
        id=1,
        uuid="00000000-0000-4000-8000-00000000000a",
        host=data["host"],
        hypervisor_hostname=data["host"],
        hypervisor_type="QEMU",
        hypervisor_version=data.get("hypervisor_version", 0),
        cpu_info="{}",
        vcpus=vcpus,
        vcpus_used=data.get("vcpus_used", 0),
        memory_mb=memory,
        memory_mb_used=data.get("memory_mb_used", 0),
        local_gb=disk,
        local_gb_used=data.get("local_gb_used", 0),
        free_ram_mb=memory - data.get("memory_mb_used", 0),
        free_disk_gb=disk - data.get("local_gb_used", 0),
        disk_available_least=None,
        running_vms=data.get("num_instances", 0),
        host_ip="127.0.0.1",
        numa_topology=None,
        pci_device_pools=objects.PciDevicePoolList(objects=pools),
        supported_hv_specs=[],
        stats={
            "num_instances": data.get("num_instances", 0),
            "io_workload": data.get("num_io_ops", 0),
            "failed_builds": data.get("failed_builds", 0),
        },
        metrics="[]",
        cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.0,
        disk_allocation_ratio=1.0,
        updated_at=now,
    )
    service = {
        "host": data["host"],
        "binary": "nova-compute",
        "disabled": False,
        "forced_down": False,
        "last_seen_up": now,
        "created_at": now,
        "updated_at": now,
    }
    state = host_manager.HostState(
        data["host"], data["host"], CELL_UUIDS[data.get("cell", "cell1")]
    )
    instances = {
        uuid: objects.Instance(uuid=uuid, system_metadata=dict(meta), image_ref="")
        for uuid, meta in data.get("instances", {}).items()
    }
    state.update(compute=compute, service=service, inst_dict=instances)
    state.aggregates = [
        objects.Aggregate(id=i, name=f"agg{i}", hosts=[data["host"]], metadata=metadata)
        for i, metadata in enumerate(data["aggregates"], start=1)
    ]
    return state


def _request_spec(case: dict[str, Any]) -> Any:
    from nova import objects

    group = None
    if case.get("group"):
        group = objects.InstanceGroup(
            policy=case["group"]["policy"], members=case["group"]["members"], hosts=[]
        )
    destination = None
    if case.get("destination"):
        cell = case["destination"]["cell"]
        destination = objects.Destination(
            cell=objects.CellMapping(uuid=CELL_UUIDS[cell], name=cell) if cell else None,
            allow_cross_cell_move=case["destination"]["allow_cross_cell_move"],
        )
    return objects.RequestSpec(
        instance_uuid="00000000-0000-4000-8000-000000000001",
        project_id="p",
        user_id="u",
        image=objects.ImageMeta.from_dict({"properties": case["image_properties"]}),
        num_instances=1,
        instance_group=group,
        requested_destination=destination,
        scheduler_hints={},
    )


def _filter(case: dict[str, Any]) -> bool | str:
    from nova.scheduler.filters import aggregate_image_properties_isolation as module

    _options(
        {
            "aggregate_image_properties_isolation_namespace": case["namespace"],
            "aggregate_image_properties_isolation_separator": case["separator"],
        }
    )
    try:
        spec = _request_spec(case)
    except Exception as exc:  # noqa: BLE001 - ValueError, or Invalid from a CPU spec
        return f"invalid: {exc}"
    state = _host_state({"host": "host1", "aggregates": case["aggregates"]})
    return bool(module.AggregateImagePropertiesIsolation().host_passes(state, spec))


def _weighers(case: dict[str, Any], classes: dict[str, Any]) -> dict[str, Any] | str:
    _options(
        {
            "image_props_weight_multiplier": 1.0,
            "image_props_weight_setting": case["image_props_weight_setting"],
        }
    )
    try:
        spec = _request_spec(case)
    except Exception as exc:  # noqa: BLE001
        return f"invalid: {exc}"
    states = [_host_state(h) for h in case["hosts"]]
    raw, multipliers = {}, {}
    for name in WEIGHERS:
        weigher = classes[name]()
        raw[name] = [_raw(name, weigher, s, spec) for s in states]
        multipliers[name] = [float(weigher.weight_multiplier(s)) for s in states]
    return {"raw": raw, "multipliers": multipliers}


def _raw(name: str, weigher: Any, state: Any, spec: Any) -> float:
    if name != "ImagePropertiesWeigher":
        return float(weigher._weigh_object(state, spec))
    every = state.instances
    state.instances = {u: i for u, i in every.items() if _readable(i)}
    try:
        return float(weigher._weigh_object(state, spec))
    finally:
        state.instances = every


def _readable(instance: Any) -> bool:
    try:
        instance.image_meta  # noqa: B018 - Nova's weigher would raise on it
    except Exception:  # noqa: BLE001
        return False
    return True


def main() -> int:
    _nova()
    from nova.scheduler import weights

    classes = {cls.__name__: cls for cls in weights.all_weighers()}
    print(json.dumps({"weighers": sorted(classes)}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "cases" not in command:
            return 0
        answers = [
            _filter(case) if case["kind"] == "filter" else _weighers(case, classes)
            for case in command["cases"]
        ]
        print(json.dumps({"answers": answers}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
