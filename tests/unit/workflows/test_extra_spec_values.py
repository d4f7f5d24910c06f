"""Nova's extra-spec values at the door (issue 15): a name Nova knows takes only the
values Nova's strict validation takes (a boolean-like word, an integer in range, one of
its words, a pattern), at create and at ``flavor-key set``; refused naming the key and
what it must be, nothing written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from novaq.cli import main
from novaq.exceptions import InvalidFlavor
from workflows import api
from workflows.api.extra_spec_values import value_problem

ACCEPTED = [
    ("hw:cpu_policy", "dedicated"),
    ("hw:cpu_thread_policy", "isolate"),
    ("hw:cpu_realtime", "Yes"),
    ("hw:cpu_realtime_mask", "^0-1"),
    ("hw:numa_nodes", "2"),
    ("hw:numa_cpus.0", "0-3,^2"),
    ("hw:numa_mem.1", "1024"),
    ("hw:mem_page_size", "2MiB"),
    ("hw:mem_page_size", "large"),
    ("hw:cpu_max_sockets", "4"),
    ("hw:redirected_usb_ports", "15"),
    ("hw:watchdog_action", "reset"),
    ("hw_rng:allowed", "false"),
    ("hw_rng:rate_bytes", "0"),
    ("os:secure_boot", "required"),
    ("quota:cpu_quota", "-1"),
    ("quota:disk_read_iops_sec", "500"),
    ("quota:vif_inbound_peak", "10"),
    ("resources:VCPU", "0"),
    ("resources1:CUSTOM_GPU", "2"),
    ("trait:HW_CPU_X86_AVX2", "forbidden"),
    ("capabilities:vcpus", ">= 2"),  # an operator's requirement: not a typed value
    ("ssd", "anything"),  # no namespace: unchecked, as Nova
]
REFUSED = [
    ("hw:cpu_policy", "x", "one of: dedicated, shared, mixed"),
    ("hw:cpu_realtime", "maybe", "a boolean-like value"),
    ("hw:numa_nodes", "0", "an integer >= 1"),
    ("hw:numa_nodes", "two", "an integer"),
    ("hw:numa_cpus.0", "0-3;4", "of the format"),
    ("hw:mem_page_size", "huge", "of the format"),
    ("hw:redirected_usb_ports", "16", "an integer <= 15"),
    ("hw:tpm_version", "3.0", "one of: 1.2, 2.0"),
    ("hw_rng:rate_period", "-5", "an integer >= 0"),
    ("os:secure_boot", "optional", "one of: disabled, required"),
    ("quota:cpu_shares", "lots", "an integer"),
    ("resources:VCPU", "1.5", "an integer"),
    ("trait:HW_CPU_X86_AVX2", "preferred", "one of: required, forbidden"),
]


@pytest.mark.parametrize(("key", "value"), ACCEPTED)
def test_a_value_nova_takes_is_accepted(key: str, value: str) -> None:
    assert value_problem(key, value) is None


@pytest.mark.parametrize(("key", "value", "words"), REFUSED)
def test_a_value_nova_refuses_is_refused_saying_what_it_must_be(
    key: str, value: str, words: str
) -> None:
    problem = value_problem(key, value)
    assert problem is not None and words in problem


@pytest.mark.parametrize(("key", "value", "words"), REFUSED[:4])
def test_create_and_set_refuse_the_value_naming_the_key_and_write_nothing(
    db_url: str, key: str, value: str, words: str
) -> None:
    with pytest.raises(InvalidFlavor, match=f"extra spec {key} must be {words}"):
        api.create_flavor("m2", 1, 512, 1, extra_specs={key: value})
    assert api.list_flavors() == []
    api.create_flavor("m1", 1, 512, 1)
    with pytest.raises(InvalidFlavor, match=f"extra spec {key} must be {words}"):
        api.set_flavor_extra_specs("m1", {"ok": "1", key: value})
    assert api.show_flavor("m1")["extra_specs"] == {}


def test_the_command_refuses_a_bad_value_as_one_error_line(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    result = CliRunner().invoke(main, ["flavor-key", "m1", "set", "hw:cpu_policy=pinned"])
    assert result.exit_code == 1
    assert "ERROR (InvalidFlavor)" in result.output and "hw:cpu_policy" in result.output
    assert api.show_flavor("m1")["extra_specs"] == {}
