"""ImagePropertiesFilter: the host must support the image's architecture, hypervisor type
and VM mode (one ``supported_instances`` triple), hypervisor version and physical address
bits. An image that asks for none of architecture, type or mode passes everywhere.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

# Nova's canonical names (``fields.Architecture/HVType/VMMode.canonicalize``).
_ARCH_ALIASES = {
    "i386": "i686",
    "i486": "i686",
    "i586": "i686",
    "x86_32": "i686",
    "x86_32p": "i686",
    "amd64": "x86_64",
}
_HV_TYPE_ALIASES = {"xapi": "xen"}
_VM_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}

_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}

Triple = tuple[str | None, str | None, str | None]


def canonical_triple(arch: str | None, hv_type: str | None, vm_mode: str | None) -> Triple:
    return (
        _canonical(arch, _ARCH_ALIASES),
        _canonical(hv_type, _HV_TYPE_ALIASES),
        _canonical(vm_mode, _VM_MODE_ALIASES),
    )


def _canonical(name: str | None, aliases: dict[str, str]) -> str | None:
    if not name:
        return None
    lowered = name.lower()
    return aliases.get(lowered, lowered)


class ImagePropertiesFilter(BaseFilter):
    run_filter_once_per_request = True

    def _wanted(self, spec: RequestSpec) -> Triple:
        props = spec.image_properties
        default_arch = self.settings.filter_scheduler.image_properties_default_architecture
        return canonical_triple(
            props.get("hw_architecture", default_arch),
            props.get("img_hv_type"),
            props.get("hw_vm_mode"),
        )

    def ignores(self, spec: RequestSpec) -> bool:
        return not any(self._wanted(spec))

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        props = spec.image_properties
        wanted = self._wanted(spec)
        if not any(wanted):
            return True
        if not host.supported_instances:
            LOG.debug("%s advertises no supported instances; image wants %s", host.host, wanted)
            return False
        if not any(_triple_matches(wanted, canonical_triple(*t)) for t in host.supported_instances):
            LOG.debug("%s supports %s, image wants %s", host.host, host.supported_instances, wanted)
            return False
        return self._version_passes(host, props) and self._address_bits_pass(host, props)

    def _version_passes(self, host: HostState, props: dict[str, str]) -> bool:
        required = props.get("img_hv_requested_version")
        if not (required and host.hypervisor_version):
            return True
        try:
            passes = version_satisfies(host.hypervisor_version, required)
        except ValueError:
            LOG.debug("%s: unreadable img_hv_requested_version %r", host.host, required)
            return False
        if not passes:
            LOG.debug(
                "%s: hypervisor version %s does not satisfy %r",
                host.host,
                host.hypervisor_version,
                required,
            )
        return passes

    def _address_bits_pass(self, host: HostState, props: dict[str, str]) -> bool:
        required = props.get("hw_maxphysaddr_bits")
        bits = (host.cpu_info.get("maxphysaddr") or {}).get("bits")
        if not (required and bits):
            return True
        if not (str(required).isdigit() and str(bits).isdigit()):
            LOG.debug("%s: unreadable physical address bits %r / %r", host.host, bits, required)
            return False
        if int(bits) < int(required):
            LOG.debug("%s: %s physical address bits, image needs %s", host.host, bits, required)
            return False
        return True


def _triple_matches(wanted: Triple, offered: Triple) -> bool:
    # NOTE: position by position (architecture with architecture...); Nova only asks that
    # each wanted name appear somewhere in the triple, which lets vm_mode "xen" match a
    # host whose hypervisor type is "xen".
    return all(w is None or w == o for w, o in zip(wanted, offered, strict=True))


def version_satisfies(hypervisor_version: int, required: str) -> bool:
    """Whether the host's version meets every comma-separated clause of ``required``.

    NOTE: a dotted operand (``">= 6.0"``) is compared as Nova does, with the host's
    ``major*1e6 + minor*1e3 + micro`` encoding turned back into ``(6, 0, 0)`` and missing
    parts read as 0; a bare integer (``">=6000000"``) is compared with the encoded number
    itself. Raises ValueError for a clause that is not ``<op> <version>``.
    """
    return all(_clause_holds(hypervisor_version, clause) for clause in required.split(","))


def _clause_holds(hypervisor_version: int, clause: str) -> bool:
    text = clause.strip()
    op = next((o for o in _COMPARISONS if text.startswith(o)), None)
    operand = text[len(op) :].strip() if op else ""
    if op is None or not operand:
        raise ValueError(f"bad version requirement {clause!r}")
    if "." not in operand:
        return _COMPARISONS[op](hypervisor_version, int(operand))
    wanted = tuple(int(part) for part in operand.split("."))
    have = _version_tuple(hypervisor_version)
    width = max(len(wanted), len(have))
    return _COMPARISONS[op](_pad(have, width), _pad(wanted, width))


def _version_tuple(encoded: int) -> tuple[int, ...]:
    return (encoded // 1_000_000, encoded // 1000 % 1000, encoded % 1000)


def _pad(parts: tuple[int, ...], width: int) -> tuple[int, ...]:
    return parts + (0,) * (width - len(parts))
