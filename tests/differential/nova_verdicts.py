"""Nova 34's own filter verdicts, for ``tests/differential`` (runs in the Nova virtualenv
of ``scripts/nova-venv``, never in novaq's: nova is no dependency of novaq).

JSON lines on stdin/stdout. ``{"cases": [{"filter": name, "host": {...}, "request":
{...}}, ...]}`` → ``{"verdicts": [true | false | "invalid: ...", ...]}``: each case's host
and request become Nova's own ``HostState`` and ``RequestSpec`` (the fields the filters
read), and the filter class of that name answers ``host_passes``. A request Nova's
objects refuse to build (image metadata Nova's API would refuse) is ``"invalid: ..."``.
The host and request keys are those of ``tests/differential/cases.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any


def _nova() -> None:
    import nova.conf
    from nova import objects

    objects.register_all()
    nova.conf.CONF([], project="nova", default_config_files=[])


def _filters() -> dict[str, Any]:
    from nova.scheduler import filters

    handler = filters.HostFilterHandler()
    return {cls.__name__: cls for cls in handler.get_all_classes()}


def _host_state(data: dict[str, Any]) -> Any:
    from nova import objects
    from nova.scheduler import host_manager

    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    compute = objects.ComputeNode(
        id=1,
        uuid="00000000-0000-4000-8000-00000000000a",
        host=data["host"],
        hypervisor_hostname=data["host"],
        hypervisor_type=data["hypervisor_type"],
        hypervisor_version=data["hypervisor_version"],
        cpu_info=json.dumps(data["cpu_info"]),
        vcpus=data["vcpus"],
        vcpus_used=data["vcpus_used"],
        memory_mb=data["memory_mb"],
        memory_mb_used=data["memory_mb_used"],
        local_gb=data["local_gb"],
        local_gb_used=data["local_gb_used"],
        free_ram_mb=data["memory_mb"] - data["memory_mb_used"],
        free_disk_gb=data["local_gb"] - data["local_gb_used"],
        disk_available_least=None,
        running_vms=data["num_instances"],
        host_ip=data.get("host_ip", "127.0.0.1"),
        numa_topology=None,
        pci_device_pools=objects.PciDevicePoolList(objects=[]),
        supported_hv_specs=[
            objects.HVSpec(arch=a, hv_type=h, vm_mode=m) for a, h, m in data["supported_instances"]
        ],
        stats=_stats(data),
        metrics=data.get("metrics", "[]"),  # the compute monitors' JSON text
        cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.0,
        disk_allocation_ratio=1.0,
        updated_at=now,
    )
    service = {
        "host": data["host"],
        "binary": "nova-compute",
        "disabled": data["disabled"],
        "forced_down": False,
        "last_seen_up": now,
        "created_at": now,
        "updated_at": now,
    }
    state = host_manager.HostState(data["host"], data["host"], "cell1")
    instances = {uuid: objects.Instance(uuid=uuid) for uuid in data["instances"]}
    state.update(compute=compute, service=service, inst_dict=instances)
    state.aggregates = [
        objects.Aggregate(id=i, name=f"agg{i}", hosts=[data["host"]], metadata=metadata)
        for i, metadata in enumerate(data["aggregates"], start=1)
    ]
    return state


def _stats(data: dict[str, Any]) -> dict[str, Any]:
    """The compute node's stats: given the host's ``instance_states`` (vm_state,
    task_state, os_type, project_id of each instance), as Nova's resource tracker counts
    them in ``update_available_resource`` (cleared, ``failed_builds`` kept, each instance
    added); else the two counts the host gives."""
    if "instance_states" not in data:
        return {"num_instances": data["num_instances"], "io_workload": data["num_io_ops"]}
    from nova.compute import stats as compute_stats

    stats = compute_stats.Stats()
    stats["failed_builds"] = 0
    for index, instance in enumerate(data["instance_states"]):
        stats.update_stats_for_instance({"uuid": f"instance-{index}", **instance})
    return dict(stats)


def _request_spec(data: dict[str, Any]) -> Any:
    from nova import objects

    flavor = objects.Flavor(
        id=1,
        flavorid="f",
        name=data["flavor_name"],
        vcpus=1,
        memory_mb=512,
        root_gb=1,
        ephemeral_gb=0,
        swap=0,
        extra_specs=data["extra_specs"],
    )
    return objects.RequestSpec(
        instance_uuid="00000000-0000-4000-8000-000000000001",
        project_id=data.get("project_id", "p"),
        user_id=data.get("user_id", "u"),
        flavor=flavor,
        image=objects.ImageMeta.from_dict({"properties": data["image_properties"]}),
        num_instances=1,
        availability_zone=None,
        scheduler_hints=data["hints"],
        ignore_hosts=None,
        force_hosts=None,
        force_nodes=None,
        requested_destination=None,
        instance_group=None,
        pci_requests=objects.InstancePCIRequests(requests=[]),
        numa_topology=None,
        is_bfv=False,
    )


def _verdict(filters: dict[str, Any], case: dict[str, Any]) -> bool | str:
    try:
        spec = _request_spec(case["request"])
    except (ValueError, TypeError) as exc:
        return f"invalid: {exc}"
    flt, state = filters[case["filter"]](), _host_state(case["host"])
    try:
        return bool(flt.host_passes(state, spec))
    except AttributeError as exc:
        if case["filter"] != "ImagePropertiesFilter":
            return f"raised: {type(exc).__name__}: {exc}"
        # Nova 34's bug: it reads hw_maxphysaddr_bits from cpu_info as from a dict, but
        # the host state holds the compute node's JSON text. The verdict novaq gives is
        # the one with cpu_info parsed, which is what Nova means.
        state.cpu_info = json.loads(state.cpu_info)
        return bool(flt.host_passes(state, spec))
    except Exception as exc:  # noqa: BLE001 - the verdict is that Nova's filter raised
        return f"raised: {type(exc).__name__}: {exc}"


def main() -> int:
    _nova()
    filters = _filters()
    print(json.dumps({"filters": sorted(filters)}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "cases" not in command:
            return 0
        verdicts = [_verdict(filters, case) for case in command["cases"]]
        print(json.dumps({"verdicts": verdicts}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
