"""The image properties of the candidates' instances (``scheduler.instance_images``): read
in one query, only when ImagePropertiesWeigher counts, and they steer a real decision."""

from __future__ import annotations

from compute.sessions import sessions_for
from compute.states import TaskState, VmState
from scheduler.manager import Scheduler
from tests.factories import (
    make_compute_node,
    make_instance,
    make_settings,
    spec_for,
    statements_run,
)

DEBIAN = {"image_os_distro": "debian", "image_min_disk": "1", "image_base_image_ref": "x"}


def _two_hosts_debian_on_the_second(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    make_compute_node(db_url, "host2")
    for meta in (DEBIAN, DEBIAN, {"image_os_distro": "ubuntu"}):
        make_instance(
            db_url,
            host="host2",
            node="host2",
            vm_state=VmState.ACTIVE,
            task_state=None,
            system_metadata=meta,
        )


def _place(db_url: str, scheduler: Scheduler, **image: str) -> tuple[str, list[str]]:
    uuid = make_instance(db_url)
    with statements_run(db_url) as statements:
        chosen = scheduler.select_and_claim(
            sessions_for(db_url), spec_for(uuid, image_properties=dict(image))
        )
    assert chosen is not None
    return chosen.host, statements


def test_a_positive_multiplier_packs_onto_the_host_running_the_same_image(db_url: str) -> None:
    _two_hosts_debian_on_the_second(db_url)
    on = Scheduler(make_settings(filter_scheduler={"image_props_weight_multiplier": 1.0}))
    host, _ = _place(db_url, on, os_distro="debian")
    assert host == "host2"


def test_off_by_default_the_instances_images_are_not_read(db_url: str) -> None:
    _two_hosts_debian_on_the_second(db_url)
    off = Scheduler(make_settings())
    host, statements = _place(db_url, off, os_distro="debian")
    assert host == "host1"  # equal weights: the first candidate
    assert not any("system_metadata" in s for s in statements)
    on = Scheduler(make_settings(filter_scheduler={"image_props_weight_multiplier": 1.0}))
    _, with_images = _place(db_url, on, os_distro="debian")
    assert len(with_images) == len(statements) + 1
    _, no_props = _place(db_url, on)
    assert len(no_props) == len(statements)


def test_a_move_reads_them_too(db_url: str) -> None:
    from compute.instance_actions import start_action
    from models.db import session_scope
    from scheduler.manager import MoveScheduler
    from tests.factories import add_migration, flavor_dict

    make_compute_node(db_url, "host0")
    _two_hosts_debian_on_the_second(db_url)
    moving = make_instance(
        db_url,
        host="host0",
        node="host0",
        vm_state=VmState.ACTIVE,
        task_state=TaskState.RESIZE_PREP,
    )
    flavor = flavor_dict()
    with session_scope(db_url) as session:
        migration = add_migration(
            session,
            moving,
            source_compute="host0",
            old_flavor=flavor,
            new_flavor=flavor,
            context={"request_spec": {"flavor": flavor}},
        )
        start_action(session, moving, "migrate", "req-move")
    spec = spec_for(moving, image_properties={"os_distro": "debian"}, ignore_hosts=("host0",))
    on = Scheduler(make_settings(filter_scheduler={"image_props_weight_multiplier": 1.0}))
    chosen = MoveScheduler(on).select(sessions_for(db_url), spec, migration)
    assert chosen.host == "host2"
