"""Nova 34's own filter+weigh path, timed in-process, for ``bench/scheduler_bench.py``.

Runs in the Nova virtualenv (``scripts/nova-venv``), never in novaq's: the benchmark
starts it as a subprocess and talks to it in JSON lines on stdin/stdout, so its runs
interleave with novaq's:

    {"hosts": [{...}, ...]}   build Nova HostStates from these host dicts (the same data
                              the benchmark writes into novaq's database) -> {"ready": n}
    {"run": k}                k timed repetitions -> {"ms": [...], "cpu_ms": [...],
                              "passed": n, "best": host}
    {"quit": true}

One repetition is what Nova's FilterScheduler does per instance between placement and the
claim: ``HostManager.get_filtered_hosts`` then ``get_weighed_hosts`` over every host
state, with Nova's default ``[filter_scheduler] enabled_filters`` and ``weight_classes``
(all weighers) and no configuration file. Nova reads its host states from the database
(and caches instance info); that part is not timed here, so the figure is Nova's
filter+weigh alone. The HostManager's start-up reads of cells, aggregates and instances
are patched out: there is no Nova database.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import uuid
from typing import Any
from unittest import mock

#: Seconds between the hosts' heartbeats during a run.
HEARTBEAT_S = 20


def _nova() -> Any:
    import nova.conf
    from nova import objects

    objects.register_all()
    nova.conf.CONF([], project="nova", default_config_files=[])
    from nova.scheduler import host_manager

    return host_manager


def _host_manager(host_manager: Any) -> Any:
    cls = host_manager.HostManager
    with (
        mock.patch.object(cls, "refresh_cells_caches"),
        mock.patch.object(cls, "_init_aggregates"),
        mock.patch.object(cls, "_init_instance_info"),
    ):
        return cls()


def _compute_node(data: dict[str, Any], now: dt.datetime) -> Any:
    from nova import objects

    arch = json.loads(data["cpu_info"]).get("arch", "x86_64")
    hv_type = data["hypervisor_type"].lower()
    return objects.ComputeNode(
        id=data["index"] + 1,
        uuid=str(uuid.uuid4()),
        host=data["host"],
        hypervisor_hostname=data["hypervisor_hostname"],
        hypervisor_type=data["hypervisor_type"],
        hypervisor_version=data["hypervisor_version"],
        cpu_info=data["cpu_info"],
        vcpus=data["vcpus"],
        vcpus_used=data["vcpus_used"],
        memory_mb=data["memory_mb"],
        memory_mb_used=data["memory_mb_used"],
        local_gb=data["local_gb"],
        local_gb_used=data["local_gb_used"],
        free_ram_mb=data["memory_mb"] - data["memory_mb_used"],
        free_disk_gb=data["local_gb"] - data["local_gb_used"],
        disk_available_least=None,
        running_vms=0,
        host_ip="127.0.0.1",
        numa_topology=None,
        pci_device_pools=objects.PciDevicePoolList(objects=[]),
        supported_hv_specs=[
            objects.HVSpec(arch=arch, hv_type=t, vm_mode="hvm")
            for t in (("kvm", "qemu") if hv_type in ("kvm", "qemu") else (hv_type,))
        ],
        stats={},
        metrics="[]",
        cpu_allocation_ratio=data["cpu_allocation_ratio"],
        ram_allocation_ratio=data["ram_allocation_ratio"],
        disk_allocation_ratio=data["disk_allocation_ratio"],
        updated_at=now,
    )


def _service(host: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "host": host,
        "binary": "nova-compute",
        "disabled": False,
        "forced_down": False,
        "last_seen_up": now,
        "created_at": now,
        "updated_at": now,
    }


def _host_states(host_manager: Any, hosts: list[dict[str, Any]]) -> list[Any]:
    now = _utcnow()
    states = []
    for data in hosts:
        state = host_manager.HostState(data["host"], data["hypervisor_hostname"], "cell1")
        compute = _compute_node(data, now)
        state.update(compute=compute, service=_service(data["host"], now), inst_dict={})
        states.append(state)
    return states


def _beat(states: list[Any]) -> None:
    """Fresh heartbeats, as Nova's services would send them: ComputeFilter checks them
    against ``service_down_time`` (60 s), which building 10,000 states or a long run
    outlasts on a loaded machine."""
    now = _utcnow()
    for state in states:
        state.update(service=_service(state.host, now))


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _request_spec() -> Any:
    from nova import objects

    flavor = objects.Flavor(
        id=1,
        flavorid="b",
        name="bench",
        vcpus=1,
        memory_mb=512,
        root_gb=1,
        ephemeral_gb=0,
        swap=0,
        extra_specs={},
    )
    return objects.RequestSpec(
        instance_uuid=str(uuid.uuid4()),
        project_id="p",
        user_id="u",
        flavor=flavor,
        image=objects.ImageMeta.from_dict({"properties": {}}),
        num_instances=1,
        availability_zone=None,
        scheduler_hints={},
        ignore_hosts=None,
        force_hosts=None,
        force_nodes=None,
        requested_destination=None,
        instance_group=None,
        pci_requests=objects.InstancePCIRequests(requests=[]),
        numa_topology=None,
        is_bfv=False,
    )


def _run(manager: Any, states: list[Any], spec: Any, reps: int) -> dict[str, Any]:
    timings, cpu, passed, best = [], [], 0, ""
    for _ in range(reps):
        started, cpu_started = time.perf_counter(), time.thread_time()
        filtered = manager.get_filtered_hosts(states, spec, index=0)
        weighed = manager.get_weighed_hosts(list(filtered), spec)
        timings.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - cpu_started) * 1000)
        passed, best = len(weighed), weighed[0].obj.host if weighed else ""
    return {"ms": timings, "cpu_ms": cpu, "passed": passed, "best": best}


def main() -> int:
    host_manager = _nova()
    manager = _host_manager(host_manager)
    spec = _request_spec()
    filters = [type(f).__name__ for f in manager.enabled_filters]
    weighers = [type(w).__name__ for w in manager.weighers]
    print(json.dumps({"filters": filters, "weighers": weighers}), flush=True)
    states: list[Any] = []
    beaten = time.monotonic()
    for line in sys.stdin:
        command = json.loads(line)
        if "hosts" in command:
            states = _host_states(host_manager, command["hosts"])
            _beat(states)
            beaten = time.monotonic()
            reply: dict[str, Any] = {"ready": len(states)}
        elif "run" in command:
            if time.monotonic() - beaten > HEARTBEAT_S:  # never inside the timing
                _beat(states)
                beaten = time.monotonic()
            reply = _run(manager, states, spec, int(command["run"]))
        else:
            return 0
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
