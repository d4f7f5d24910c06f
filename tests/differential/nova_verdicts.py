"""Nova 34's own filter verdicts, for ``tests/differential`` (runs in the Nova virtualenv
of ``scripts/nova-venv``, never in novaq's: nova is no dependency of novaq).

JSON lines on stdin/stdout. ``{"cases": [{"filter": name, "host": {...}, "request":
{...}}, ...]}`` → ``{"verdicts": [true | false | "invalid: ...", ...]}``: each case's host
and request become Nova's own ``HostState`` and ``RequestSpec`` (the fields the filters
read), and the filter class of that name answers ``host_passes``. A request Nova's
objects refuse to build (image metadata Nova's API would refuse) is ``"invalid: ..."``.
The host and request keys are those of ``tests/differential/cases.py``; the request's
``options`` are set in Nova's CONF first.

AvailabilityZoneFilter, which Nova 34 no longer has, is answered by what replaced it
(``PLACEMENT``). A PciPassthroughFilter refusal that only a zero-count request or the
requests' order causes is ``"refused: ..."`` (see ``_pci_refusal``).
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
        pci_device_pools=objects.PciDevicePoolList(
            objects=[
                objects.PciDevicePool(
                    vendor_id=vendor,
                    product_id=product,
                    numa_node=None,
                    tags={"dev_type": dev_type},
                    count=count,
                )
                for vendor, product, dev_type, count in data.get("pci_pools", [])
            ]
        ),
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
        objects.Aggregate(
            id=i, uuid=_aggregate_uuid(i), name=f"agg{i}", hosts=[data["host"]], metadata=metadata
        )
        for i, metadata in enumerate(data["aggregates"], start=1)
    ]
    # One allocation candidate with no provider mapping: PCI is not in placement here.
    state.allocation_candidates = [{"mappings": {}}]
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


def _aggregate_uuid(i: int) -> str:
    return f"00000000-0000-4000-8000-0000000003{i:02d}"


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
    image: dict[str, Any] = {"properties": data["image_properties"]}
    if data.get("image_id"):
        image.update(id=data["image_id"], name=data.get("image_name", ""))
    return objects.RequestSpec(
        instance_uuid=data.get("instance_uuid", "00000000-0000-4000-8000-000000000001"),
        project_id=data.get("project_id", "p"),
        user_id=data.get("user_id", "u"),
        flavor=flavor,
        image=objects.ImageMeta.from_dict(image),
        num_instances=1,
        availability_zone=data.get("availability_zone"),
        scheduler_hints=data["hints"],
        ignore_hosts=None,
        force_hosts=None,
        force_nodes=None,
        requested_destination=None,
        instance_group=_instance_group(data.get("group")),
        pci_requests=_pci_requests(flavor),
        numa_topology=None,
        is_bfv=False,
    )


def _instance_group(group: dict[str, Any] | None) -> Any:
    """The group as the scheduler loads it (``policies`` is the one-policy list Nova's
    ``_from_db_object`` sets; rules are stored as strings)."""
    from nova import objects

    if not group:
        return None
    return objects.InstanceGroup(
        uuid=group["uuid"],
        policy=group["policy"],
        policies=[group["policy"]],
        rules={key: str(value) for key, value in group["rules"].items()},
        members=list(group["members"]),
        hosts=list(group["hosts"]),
    )


def _pci_requests(flavor: Any) -> Any:
    """The flavor's PCI requests, as Nova's API makes them: the extra spec's validator
    (the pattern of ``nova/api/validation/extra_specs/pci_passthrough.py``), then the alias
    translation of ``nova.pci.request`` (which refuses unknown aliases)."""
    from nova.api.validation.extra_specs import validators
    from nova.pci import request

    value = flavor.extra_specs.get("pci_passthrough:alias")
    if value is not None:
        validators.validate("pci_passthrough:alias", value)
    return request.get_pci_requests_from_flavor(flavor)


# The options a case may set: their group in Nova's CONF and Nova's default.
_OPTIONS: dict[str, tuple[str, Any]] = {
    "isolated_hosts": ("filter_scheduler", []),
    "isolated_images": ("filter_scheduler", []),
    "restrict_isolated_hosts_to_isolated_images": ("filter_scheduler", True),
    "pci_alias": ("pci", []),
}
_applied: dict[str, Any] = {}


def _apply_options(options: dict[str, Any]) -> None:
    """Set the case's options in Nova's CONF, Nova's defaults for those it leaves out
    (only those that changed since the last case)."""
    import nova.conf

    for key, (group, default) in _OPTIONS.items():
        value = options.get(key, default)
        if _applied.get(key) == value:
            continue
        name = key
        if key == "pci_alias":
            name, value_set = "alias", [json.dumps(alias) for alias in value]
        else:
            value_set = value
        nova.conf.CONF.set_override(name, value_set, group=group)
        _applied[key] = value


def _verdict(filters: dict[str, Any], case: dict[str, Any]) -> bool | str:
    from nova import exception

    _apply_options(case["request"].get("options", {}))
    try:
        spec = _request_spec(case["request"])
    except (ValueError, TypeError, exception.NovaException) as exc:
        return f"invalid: {exc}"
    if case["filter"] in PLACEMENT:
        return PLACEMENT[case["filter"]](case, spec)
    flt, state = filters[case["filter"]](), _host_state(case["host"])
    try:
        passes = bool(flt.host_passes(state, spec))
        if not passes and case["filter"] == "PciPassthroughFilter":
            return _pci_refusal(case, spec)
        return passes
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


def _availability_zone(case: dict[str, Any], spec: Any) -> bool | str:
    """Nova 34 has no AvailabilityZoneFilter: its request filter
    ``map_az_to_placement_aggregate`` asks placement for members of the aggregates whose
    ``availability_zone`` metadata is the requested zone (every aggregate of the cloud:
    the host's own and ``other_zones``), and places no limit when there is none.
    Placement's part, ``member_of`` (each required list: in at least one of them), is
    the one line here."""
    from nova import objects
    from nova.scheduler import request_filter

    host = case["host"]
    mine = [(_aggregate_uuid(i), m) for i, m in enumerate(host["aggregates"], start=1)]
    others = [
        (_aggregate_uuid(50 + i), {"availability_zone": zone})
        for i, zone in enumerate(host.get("other_zones", []))
    ]

    def get_by_metadata(ctxt: Any, key: str, value: str) -> list[Any]:
        return [
            objects.Aggregate(uuid=uuid, metadata=metadata)
            for uuid, metadata in mine + others
            if metadata.get(key) == value
        ]

    zones = {m["availability_zone"] for _, m in mine + others if "availability_zone" in m}
    if spec.availability_zone and spec.availability_zone not in zones | {"nova"}:
        # Nova's API refuses it (compute API: "The requested availability zone is not
        # available"), counting the default zone as available (a host is in no zone).
        return "invalid: the requested availability zone is not available"
    real = objects.AggregateList.get_by_metadata
    objects.AggregateList.get_by_metadata = get_by_metadata
    try:
        request_filter.map_az_to_placement_aggregate(None, spec)
    finally:
        objects.AggregateList.get_by_metadata = real
    destination = spec.requested_destination
    required = destination.aggregates if destination and "aggregates" in destination else None
    member_of = {uuid for uuid, _ in mine}
    return all(member_of & set(group.split(",")) for group in required or [])


def _pci_refusal(case: dict[str, Any], spec: Any) -> bool | str:
    """Nova's PciPassthroughFilter refused the host: say so (False), or say that it would
    pass but for a zero-count request (``alias:0`` still needs a free device of the
    alias: its empty pool list fails ``_apply_request``) and/or the requests' order (an
    untyped request took devices a later typed one needed): ``"refused: <reasons>"``."""
    requests = list(spec.pci_requests.requests)
    nonzero = [r for r in requests if r.count]
    typed = sorted(nonzero, key=lambda r: "dev_type" not in r.spec[0])
    for subset in (nonzero, typed):
        if subset == requests or (subset is typed and typed == nonzero):
            continue
        spec.pci_requests.requests = subset
        flt = _FILTER_CLASSES["PciPassthroughFilter"]()
        if flt.host_passes(_host_state(case["host"]), spec):
            reasons = ["zero-count request"] if nonzero != requests else []
            reasons += ["request order"] if subset is typed else []
            return "refused: " + " and ".join(reasons)
    return False


PLACEMENT = {"AvailabilityZoneFilter": _availability_zone}
_FILTER_CLASSES: dict[str, Any] = {}


def main() -> int:
    _nova()
    filters = _filters()
    _FILTER_CLASSES.update(filters)
    print(json.dumps({"filters": sorted(filters), "placement": sorted(PLACEMENT)}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "cases" not in command:
            return 0
        verdicts = [_verdict(filters, case) for case in command["cases"]]
        print(json.dumps({"verdicts": verdicts}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
