"""The resource tracker's per-node stats (``compute.stats``), counted as Nova's
``nova/compute/stats.py`` counts them after ``update_available_resource``;
``tests/differential`` compares them with Nova's own ``Stats`` class."""

from __future__ import annotations

from compute.stats import instance_stats, is_instance_stat


def test_each_state_type_and_project_of_the_instances_is_counted() -> None:
    groups = [
        ("active", None, "linux", "p1", 2),
        ("building", "spawning", None, "p2", 1),
        ("active", "image_snapshot", "windows", "p1", 1),
        ("stopped", None, "linux", "p2", 0),  # an empty group counts nothing
    ]
    assert instance_stats(groups) == {
        "num_instances": 4,
        "num_vm_active": 3,
        "num_vm_building": 1,
        "num_task_None": 2,
        "num_task_spawning": 1,
        "num_task_image_snapshot": 1,
        "num_os_type_linux": 2,
        "num_os_type_None": 1,
        "num_os_type_windows": 1,
        "num_proj_p1": 3,
        "num_proj_p2": 1,
        "io_workload": 2,  # the build and the snapshot
    }


def test_a_node_without_instances_has_no_instance_stats() -> None:
    assert instance_stats([]) == {}


def test_the_instance_stat_names_are_nova_s() -> None:
    for name in ("num_instances", "io_workload", "num_vm_active", "num_task_None"):
        assert is_instance_stat(name)
    for name in ("num_os_type_linux", "num_proj_demo"):
        assert is_instance_stat(name)
    for name in ("failed_builds", "num_io_ops", "num_vms", "vcpus_used", "stats"):
        assert not is_instance_stat(name)


def test_an_instance_building_in_an_io_task_counts_twice_as_in_nova() -> None:
    # Nova's io_workload sums its counters: num_vm_building plus num_task_resize_migrating.
    stats = instance_stats([("building", "resize_migrating", "linux", "p1", 1)])
    assert stats["io_workload"] == 2
