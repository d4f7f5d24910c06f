"""The values Nova's strict extra-spec validation (API 2.86) accepts for the names it
knows: a boolean-like word, an integer in a range, one of a few words, or a pattern.

``workflows.api.extra_specs`` says which names exist; this module says, for those whose
value Nova checks, what the value must be. A name not listed here (an unscoped key, a
``capabilities:`` requirement with its operator) is checked elsewhere or not at all, as in
Nova.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: What ``oslo_utils.strutils.bool_from_string(strict=True)`` takes, case-insensitively.
_BOOLS = frozenset(("1", "t", "true", "on", "y", "yes", "0", "f", "false", "off", "n", "no"))
#: A CPU set such as ``0-3,^2`` (``hw:cpu_realtime_mask``, ``hw:numa_cpus.N``).
_CPU_SET = r"\^?\d+((-\d+)?(,\^?\d+(-\d+)?)?)*"
_GROUP = r"[a-zA-Z0-9_-]{0,64}"


@dataclass(frozen=True, slots=True)
class Rule:
    """What a value must be. ``kind`` is "bool", "int" (``minimum``..``maximum``),
    "enum" (one of ``words``) or "pattern" (a full match of ``pattern``)."""

    kind: str
    words: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    pattern: str = ""


BOOL = Rule("bool")
INT = Rule("int")
NATURAL = Rule("int", minimum=0)
POSITIVE = Rule("int", minimum=1)


def _enum(*words: str) -> Rule:
    return Rule("enum", words=words)


#: Full-match name pattern -> the rule its value follows.
RULES: dict[str, Rule] = {
    r"hw:cpu_realtime": BOOL,
    r"hw:cpu_realtime_mask": Rule("pattern", pattern=r"(\^)?\d+((-\d+)?(,\^?\d+(-\d+)?)?)*"),
    r"hw:hide_hypervisor_id": BOOL,
    r"hw:cpu_policy": _enum("dedicated", "shared", "mixed"),
    r"hw:cpu_thread_policy": _enum("prefer", "isolate", "require"),
    r"hw:emulator_threads_policy": _enum("isolate", "share"),
    r"hw:cpu_dedicated_mask": Rule("pattern", pattern=_CPU_SET),
    r"hw:mem_page_size": Rule("pattern", pattern=r"(large|small|any|\d+([kKMGT]i?)?(b|bit|B)?)"),
    r"hw:locked_memory": BOOL,
    r"hw:numa_nodes": POSITIVE,
    r"hw:numa_cpus\.\d+": Rule("pattern", pattern=_CPU_SET),
    r"hw:numa_mem\.\d+": POSITIVE,
    r"hw:pci_numa_affinity_policy": _enum("required", "preferred", "legacy", "socket"),
    r"hw:cpu_(max_)?(sockets|cores|threads)": POSITIVE,
    r"hw:boot_menu": BOOL,
    r"hw:vif_multiqueue_enabled": BOOL,
    r"hw:mem_encryption": BOOL,
    r"hw:mem_encryption_model": _enum("amd-sev", "amd-sev-es", "amd-sev-snp"),
    r"hw:pmem": Rule("pattern", pattern=r"([a-zA-Z0-9_]+(,)?)+"),
    r"hw:pmu": BOOL,
    r"hw:serial_port_count": NATURAL,
    r"hw:tpm_model": _enum("tpm-tis", "tpm-crb"),
    r"hw:tpm_version": _enum("1.2", "2.0"),
    r"hw:tpm_secret_security": _enum("user", "host", "deployment"),
    r"hw:watchdog_action": _enum("none", "pause", "poweroff", "reset", "disabled"),
    r"hw:viommu_model": _enum("intel", "smmuv3", "virtio", "auto"),
    r"hw:virtio_packed_ring": BOOL,
    r"hw:sound_model": _enum("sb16", "es1370", "pcspk", "ac97", "ich6", "ich9", "usb", "virtio"),
    r"hw:usb_model": _enum("none", "nec-xhci", "qemu-xhci"),
    r"hw:redirected_usb_ports": Rule("int", minimum=0, maximum=15),
    r"hw:ephemeral_encryption": BOOL,
    r"hw:ephemeral_encryption_format": _enum("plain", "luks", "luksv2"),
    r"hw_rng:allowed": BOOL,
    r"hw_rng:rate_(bytes|period)": NATURAL,
    r"hw_video:ram_max_mb": NATURAL,
    r"os:secure_boot": _enum("disabled", "required"),
    r"quota:cpu_(shares|period)": NATURAL,
    r"quota:cpu_quota": INT,
    r"quota:(cpu|memory|disk_io|vif)_limit": NATURAL,
    r"quota:(cpu|memory|disk_io|vif)_reservation": INT,
    r"quota:(cpu|memory|disk_io|vif)_shares_level": _enum("custom", "high", "normal", "low"),
    r"quota:(cpu|memory|disk_io|vif)_shares_share": NATURAL,
    r"quota:disk_(read|write|total)_(bytes|iops)_sec": NATURAL,
    r"quota:vif_(inbound|outbound)_(average|peak|burst)": NATURAL,
    rf"resources{_GROUP}:[A-Z0-9_]+": INT,
    rf"trait{_GROUP}:[A-Z][A-Z0-9_]*": _enum("required", "forbidden"),
    # Nova's pattern (no space around a count but before a comma); the aliases themselves
    # are checked against ``[pci] alias`` by ``compute.pci.parse_alias_spec``.
    r"pci_passthrough:alias": Rule("pattern", pattern=r"[^:]+:\d+(?:\s*,\s*[^:]+:\d+)*"),
}

_COMPILED = [(re.compile(name), rule) for name, rule in RULES.items()]


def value_problem(key: str, value: str) -> str | None:
    """What ``value`` must be for the known extra spec ``key`` (None if it is fine, or
    if Nova does not check this key's value)."""
    for name, rule in _COMPILED:
        if name.fullmatch(key):
            return _check(rule, value)
    return None


def _check(rule: Rule, value: str) -> str | None:
    if rule.kind == "bool":
        return None if value.strip().lower() in _BOOLS else "a boolean-like value"
    if rule.kind == "enum":
        return None if value in rule.words else f"one of: {', '.join(rule.words)}"
    if rule.kind == "pattern":
        return None if re.fullmatch(rule.pattern, value) else f"of the format {rule.pattern!r}"
    return _int_problem(rule, value)


def _int_problem(rule: Rule, value: str) -> str | None:
    try:
        number = int(value)
    except ValueError:
        return "an integer"
    if rule.minimum is not None and number < rule.minimum:
        return f"an integer >= {rule.minimum}"
    if rule.maximum is not None and number > rule.maximum:
        return f"an integer <= {rule.maximum}"
    return None
