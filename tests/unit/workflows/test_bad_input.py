"""Bad input through the Python API, table-driven (issue 14, item 8): every malformed
request is refused with one clear error whose message names the field, and nothing is
written (no row, no action, no message queued)."""

from __future__ import annotations

from typing import Any

import pytest

from novaq.exceptions import ComputeHostNotFound, InvalidInput, NovaqError, ResizeError
from tests.unit.workflows.bad_input import BIG, CLI_CASES, LONG, fill, make_world, state
from workflows import api


@pytest.fixture
def world(db_url: str) -> dict[str, Any]:
    return make_world(db_url)


#: (id, call name, args, kwargs, error type, words the message must hold: the field).
#: ``"$uuid"`` and ``"$agg"`` stand for the world's server and aggregate.
API_CASES: list[tuple[str, str, tuple[Any, ...], dict[str, Any], type[NovaqError], str]] = [
    # names: at most 255 printable characters
    ("boot-name-nul", "boot", ("vm\x00", "m1", "cirros"), {}, InvalidInput, "server name"),
    ("boot-name-esc", "boot", ("\x1b[31mvm", "m1", "cirros"), {}, InvalidInput, "server name"),
    ("boot-name-newline", "boot", ("v\nm", "m1", "cirros"), {}, InvalidInput, "server name"),
    ("boot-name-rtl", "boot", ("vm\u202egpj", "m1", "cirros"), {}, InvalidInput, "server name"),
    ("boot-name-long", "boot", (LONG, "m1", "cirros"), {}, InvalidInput, "server name"),
    ("boot-name-10mb", "boot", (BIG, "m1", "cirros"), {}, InvalidInput, "server name"),
    ("boot-name-blank", "boot", ("  ", "m1", "cirros"), {}, InvalidInput, "server name"),
    ("boot-flavor-nul", "boot", ("vm", "m\x001", "cirros"), {}, InvalidInput, "flavor"),
    ("boot-image-esc", "boot", ("vm", "m1", "cir\x1bros"), {}, InvalidInput, "image"),
    ("boot-group-nul", "boot", ("vm", "m1", "cirros"), {"group": "g\x00"}, InvalidInput, "group"),
    ("boot-count-huge", "boot", ("vm", "m1", "cirros"), {"count": 10**30}, InvalidInput, "count"),
    ("boot-count-zero", "boot", ("vm", "m1", "cirros"), {"count": 0}, InvalidInput, "count"),
    (
        "boot-zone-newline",
        "boot",
        ("vm", "m1", "cirros"),
        {"availability_zone": "nova\n"},
        InvalidInput,
        "availability_zone",
    ),
    (
        "boot-forced-host-unknown",
        "boot",
        ("vm", "m1", "cirros"),
        {"availability_zone": "nova:nohost"},
        ComputeHostNotFound,
        "nohost",
    ),
    (
        "boot-forced-host-list",
        "boot",
        ("vm", "m1", "cirros"),
        {"availability_zone": ["nova:host1"]},
        InvalidInput,
        "availability_zone",
    ),
    ("flavor-name-tab", "create_flavor", ("m\t2", 1, 512, 1), {}, InvalidInput, "flavor name"),
    ("flavor-name-long", "create_flavor", (LONG, 1, 512, 1), {}, InvalidInput, "flavor name"),
    ("flavor-name-rtl", "create_flavor", ("\u202em2", 1, 512, 1), {}, InvalidInput, "flavor name"),
    # integers in Nova's ranges (db.MAX_INT), not OverflowError
    ("flavor-vcpus-huge", "create_flavor", ("m2", 10**30, 512, 1), {}, InvalidInput, "vcpus"),
    ("flavor-vcpus-2**31", "create_flavor", ("m2", 2**31, 512, 1), {}, InvalidInput, "vcpus"),
    ("flavor-ram-huge", "create_flavor", ("m2", 1, 2**40, 1), {}, InvalidInput, "memory_mb"),
    ("flavor-disk-huge", "create_flavor", ("m2", 1, 512, 10**30), {}, InvalidInput, "root_gb"),
    ("flavor-swap-negative", "create_flavor", ("m2", 1, 512, 1, 0, -1), {}, InvalidInput, "swap"),
    ("flavor-vcpus-zero", "create_flavor", ("m2", 0, 512, 1), {}, InvalidInput, "vcpus"),
    ("flavor-vcpus-string", "create_flavor", ("m2", "2", 512, 1), {}, InvalidInput, "vcpus"),
    ("flavor-ram-float", "create_flavor", ("m2", 1, 512.5, 1), {}, InvalidInput, "memory_mb"),
    # extra specs: Nova's lengths and operators
    *(
        (
            f"extra-spec-{label}",
            "create_flavor",
            ("m2", 1, 512, 1),
            {"extra_specs": {key: value}},
            InvalidInput,
            "extra spec",
        )
        for label, key, value in [
            ("value-10mb", "aggregate_instance_extra_specs:x", BIG),
            ("value-long", "aggregate_instance_extra_specs:x", "v" * 256),
            ("key-long", "k" * 256, "1"),
            ("key-nul", "capabilities:\x00", "1"),
            ("value-esc", "aggregate_instance_extra_specs:x", "a\x1bb"),
            ("missing-operand", "capabilities:vcpus", ">="),
            ("unknown-operator", "capabilities:vcpus", "=> 4"),
            ("unknown-lt", "capabilities:vcpus", "< 4"),
            ("in-alone", "capabilities:cpu_info", "<in>"),
            ("all-in-alone", "capabilities:cpu_info", "<all-in>"),
            ("s-eq-alone", "capabilities:hypervisor_type", "s=="),
            ("numeric-not-number", "capabilities:vcpus", ">= many"),
            ("or-malformed", "capabilities:hypervisor_type", "<or> kvm qemu"),
            ("eq-alone", "capabilities:vcpus", "="),
            # Nova's namespaces (strict validation, API 2.86): a name it does not know
            ("hw-unknown", "hw:cpu_polcy", "dedicated"),
            ("hw-numa-not-a-number", "hw:numa_cpus.first", "0-1"),
            ("hw-rng-unknown", "hw_rng:rate", "10"),
            ("hw-video-unknown", "hw_video:ram_mb", "64"),
            ("capabilities-unknown", "capabilities:cpu_flags", "<in> avx"),
            ("aggregate-specs-empty", "aggregate_instance_extra_specs:", "ssd"),
            ("pci-passthrough-unknown", "pci_passthrough:aliases", "gpu:1"),
            ("resources-lower-case", "resources:vcpu", "1"),
            ("resources-group-unknown", "resources1:GPU", "1"),
            ("trait-lower-case", "trait:hw_cpu_x86_avx", "required"),
            ("quota-unknown", "quota:cpu_sharez", "10"),
            ("os-unknown", "os:secure", "required"),
            ("accel-unknown", "accel:profile", "p"),
            ("vmware-unknown", "vmware:hw", "vmx-13"),
        ]
    ),
    # aggregates and their metadata
    ("aggregate-name-nl", "create_aggregate", ("a\nb",), {}, InvalidInput, "aggregate name"),
    ("aggregate-name-long", "create_aggregate", (LONG,), {}, InvalidInput, "aggregate name"),
    ("aggregate-zone-colon", "create_aggregate", ("a2", "az:1"), {}, InvalidInput, "availability"),
    ("aggregate-zone-esc", "create_aggregate", ("a2", "a\x1bz"), {}, InvalidInput, "availability"),
    (
        "metadata-value-10mb",
        "set_aggregate_metadata",
        ("$agg", {"k": BIG}),
        {},
        InvalidInput,
        "metadata k",
    ),
    (
        "metadata-key-long",
        "set_aggregate_metadata",
        ("$agg", {LONG: "v"}),
        {},
        InvalidInput,
        "metadata",
    ),
    (
        "metadata-key-rtl",
        "set_aggregate_metadata",
        ("$agg", {"k\u202e": "v"}),
        {},
        InvalidInput,
        "metadata",
    ),
    (
        "metadata-zone-colon",
        "set_aggregate_metadata",
        ("$agg", {"availability_zone": "az:1"}),
        {},
        InvalidInput,
        "availability_zone",
    ),
    (
        "metadata-value-list",
        "set_aggregate_metadata",
        ("$agg", {"k": ["v"]}),
        {},
        InvalidInput,
        "metadata k",
    ),
    (
        "aggregate-id-huge",
        "add_host_to_aggregate",
        (10**30, "host1"),
        {},
        InvalidInput,
        "aggregate id",
    ),
    ("aggregate-host-nul", "add_host_to_aggregate", ("$agg", "host\x00"), {}, InvalidInput, "host"),
    # server groups
    (
        "group-name-nul",
        "create_server_group",
        ("g\x00", "affinity"),
        {},
        InvalidInput,
        "server group name",
    ),
    (
        "group-name-rtl",
        "create_server_group",
        ("\u202eg", "affinity"),
        {},
        InvalidInput,
        "server group name",
    ),
    (
        "group-rules-string",
        "create_server_group",
        ("g", "anti-affinity", "max_server_per_host=2"),
        {},
        InvalidInput,
        "rules",
    ),
    (
        "group-rule-huge",
        "create_server_group",
        ("g", "anti-affinity", {"max_server_per_host": 10**30}),
        {},
        InvalidInput,
        "max_server_per_host",
    ),
    # services
    ("disable-reason-int", "disable_service", ("host1",), {"reason": 5}, InvalidInput, "reason"),
    (
        "disable-reason-nl",
        "disable_service",
        ("host1",),
        {"reason": "a\nb"},
        InvalidInput,
        "reason",
    ),
    (
        "disable-reason-long",
        "disable_service",
        ("host1",),
        {"reason": LONG},
        InvalidInput,
        "reason",
    ),
    ("disable-host-list", "disable_service", (["host1"],), {}, InvalidInput, "host"),
    ("enable-host-int", "enable_service", (1,), {}, InvalidInput, "host"),
    ("forced-down-string", "force_down_service", ("host1", "no"), {}, InvalidInput, "forced_down"),
    ("forced-down-host-list", "force_down_service", (["host1"],), {}, InvalidInput, "host"),
    ("periodic-host-list", "run_periodic_task", ("heal", ["host1"]), {}, InvalidInput, "host"),
    # queries and waits
    ("heals-limit-string", "list_heals", (), {"limit": "ten"}, InvalidInput, "limit"),
    ("heals-limit-negative", "list_heals", (), {"limit": -1}, InvalidInput, "limit"),
    ("heals-limit-huge", "list_heals", (), {"limit": 10**30}, InvalidInput, "limit"),
    ("wait-status-int", "wait", ("$uuid", 123), {}, InvalidInput, "status"),
    ("wait-status-unknown", "wait", ("$uuid", "ACTIV"), {}, InvalidInput, "status"),
    (
        "wait-timeout-string",
        "wait",
        ("$uuid", "ACTIVE"),
        {"timeout": "soon"},
        InvalidInput,
        "timeout",
    ),
    (
        "wait-timeout-negative",
        "wait",
        ("$uuid", "ACTIVE"),
        {"timeout": -1.0},
        InvalidInput,
        "timeout",
    ),
    (
        "wait-timeout-inf",
        "wait",
        ("$uuid", "ACTIVE"),
        {"timeout": float("inf")},
        InvalidInput,
        "timeout",
    ),
    (
        "wait-interval-nan",
        "wait",
        ("$uuid", "ACTIVE"),
        {"interval": float("nan")},
        InvalidInput,
        "interval",
    ),
    (
        "diagnostics-timeout-neg",
        "diagnostics",
        ("$uuid",),
        {"timeout": -5.0},
        InvalidInput,
        "timeout",
    ),
    ("audit-timeout-string", "audit", (), {"timeout": "soon"}, InvalidInput, "timeout"),
    ("console-length-huge", "console_log", ("$uuid",), {"length": 10**30}, InvalidInput, "length"),
    ("list-host-nul", "list_instances", (), {"host": "h\x00"}, InvalidInput, "host"),
    ("migrations-host-int", "list_migrations", (), {"host": 3}, InvalidInput, "host"),
    # moves and locks on the server
    ("resize-disk-down", "resize", ("$uuid", "small-disk"), {}, ResizeError, "disk"),
    ("resize-flavor-esc", "resize", ("$uuid", "m\x1b1"), {}, InvalidInput, "flavor"),
    (
        "migrate-host-unknown",
        "migrate",
        ("$uuid",),
        {"host": "nohost"},
        ComputeHostNotFound,
        "nohost",
    ),
    ("migrate-host-list", "migrate", ("$uuid",), {"host": ["host1"]}, InvalidInput, "host"),
    ("migrate-host-nul", "migrate", ("$uuid",), {"host": "host\x00"}, InvalidInput, "host"),
    ("lock-reason-nul", "lock", ("$uuid",), {"reason": "r\x00"}, InvalidInput, "reason"),
    ("lock-reason-long", "lock", ("$uuid",), {"reason": LONG}, InvalidInput, "reason"),
    ("lock-reason-int", "lock", ("$uuid",), {"reason": 7}, InvalidInput, "reason"),
]


@pytest.mark.parametrize(
    ("call", "args", "kwargs", "error", "field"),
    [pytest.param(*case[1:], id=case[0]) for case in API_CASES],
)
def test_the_api_refuses_bad_input_naming_the_field_and_writes_nothing(
    db_url: str,
    world: dict[str, Any],
    call: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[NovaqError],
    field: str,
) -> None:
    before = state(db_url)
    with pytest.raises(error) as raised:
        getattr(api, call)(*(fill(a, world) for a in args), **kwargs)
    message = str(raised.value)
    assert field in message, message
    assert len(message) < 400, "a 10 MB value is not echoed back"
    assert state(db_url) == before


def test_the_cases_are_at_least_sixty() -> None:
    assert len(API_CASES) + len(CLI_CASES) >= 60
