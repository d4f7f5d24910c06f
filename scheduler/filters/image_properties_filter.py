"""ImagePropertiesFilter: the host must support the image's architecture, hypervisor type
and VM mode (one ``supported_instances`` triple), hypervisor version and physical address
bits. An image that asks for none of architecture, type or mode passes everywhere.

``hw_maxphysaddr_bits`` is compared with the host's ``cpu_info.maxphysaddr.bits``. Nova 34
raises there (``AttributeError``: it reads ``cpu_info`` as a dict, but its host state
holds the compute node's JSON text), which fails the whole request; novaq compares the
bits as Nova means to. The triple is matched position by position (``_triple_matches``).
Legacy property names count as Nova's image metadata reads them (``architecture`` for
``hw_architecture``, ``hypervisor_type``, ``vm_mode``, ``hypervisor_version_requires``).
"""

from __future__ import annotations

import logging

from scheduler import hypervisor_version, image_meta_props
from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.image_meta_props import (  # Nova's canonical names
    ARCHITECTURE_ALIASES,
    HV_TYPE_ALIASES,
    VM_MODE_ALIASES,
)
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

Triple = tuple[str | None, str | None, str | None]


def canonical_triple(arch: str | None, hv_type: str | None, vm_mode: str | None) -> Triple:
    return (
        _canonical(arch, ARCHITECTURE_ALIASES),
        _canonical(hv_type, HV_TYPE_ALIASES),
        _canonical(vm_mode, VM_MODE_ALIASES),
    )


def _canonical(name: str | None, aliases: dict[str, str]) -> str | None:
    if not name:
        return None
    lowered = name.lower()
    return aliases.get(lowered, lowered)


class ImagePropertiesFilter(BaseFilter):
    run_filter_once_per_request = True

    def _wanted(self, spec: RequestSpec) -> Triple:
        props = image_meta_props.with_current_names(spec.image_properties)
        default_arch = self.settings.filter_scheduler.image_properties_default_architecture
        return canonical_triple(
            props.get("hw_architecture", default_arch),
            props.get("img_hv_type"),
            props.get("hw_vm_mode"),
        )

    def ignores(self, spec: RequestSpec) -> bool:
        return not any(self._wanted(spec))

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        props = image_meta_props.with_current_names(spec.image_properties)
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
            predicate = hypervisor_version.parse(required)
        except ValueError as exc:
            # Refused when the image is stored (workflows.api.images_store); an older
            # row may still hold one. Nova refuses such an image before scheduling.
            LOG.debug("%s: unreadable img_hv_requested_version %r: %s", host.host, required, exc)
            return False
        passes = hypervisor_version.satisfied_by(predicate, host.hypervisor_version)
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
