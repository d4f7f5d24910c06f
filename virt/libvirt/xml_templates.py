"""A guest's domain XML from a template kept per shape, instead of config objects and an
lxml tree built and serialised at every spawn (issue 16: about 0.35 ms of CPU a build).

Two guests of one shape (flavor, image, PCI devices, platform, options, owner, instances
path) have the same XML but for three strings: the uuid (``<uuid>``, and the disk and
console paths under ``<instances_path>/<uuid>/``), the domain's ``<name>`` and the
server's display name. So the XML of a shape is built once, by the designer as before,
for a stand-in guest whose three strings are markers; every other guest of that shape is
that text with the markers replaced, in one pass.

NOTE: byte for byte what ``design_guest(...).to_xml()`` gives (the tests compare them).
A value is put in as it is only when lxml would write it unchanged: text with no
character XML escapes and nothing lxml refuses; any other guest is designed in full.
A shape is templated only when a second stand-in's XML is the first's with the markers
replaced by its strings: a designer that came to derive something from the uuid or a
name (a serial number, say) has its guests designed in full.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final

from virt.driver import GuestSpec

#: The stand-in guest's uuid, domain name and display name: strings no real guest's XML
#: holds otherwise (a uuid is canonical lower-case hex; the names are checked below).
UUID_MARKER: Final = "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"
NAME_MARKER: Final = "novaq-template-name-marker"
DISPLAY_MARKER: Final = "novaq-template-display-marker"
_MARKERS: Final = re.compile("|".join(map(re.escape, (UUID_MARKER, NAME_MARKER, DISPLAY_MARKER))))

#: How many shapes are kept (a host runs a few flavors of a few images).
KEPT: Final = 32

#: What XML escapes in text or attributes; a value holding one is designed in full.
_ESCAPED: Final = frozenset("&<>\"'")
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _verbatim(value: str) -> bool:
    """Whether lxml writes ``value`` unchanged (and has nothing in it to refuse)."""
    return value.isprintable() and _ESCAPED.isdisjoint(value) and not _MARKERS.search(value)


class GuestXmlTemplates:
    """The domain XML of guests, from templates of their shapes (``design`` makes the
    full XML of a spec: the designer and ``to_xml``)."""

    def __init__(self, design: Callable[[GuestSpec], str], kept: int = KEPT) -> None:
        self._design = design
        self._kept = kept
        self._templates: OrderedDict[Hashable, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def xml(self, spec: GuestSpec, context: Hashable = ()) -> str:
        """``design(spec)``; ``context``: what else the XML depends on (platform,
        options, owner, instances path), part of the shape."""
        if not (
            _UUID.fullmatch(spec.uuid) and _verbatim(spec.name) and _verbatim(spec.display_name)
        ):
            return self._design(spec)
        # An empty display name is an empty element: a shape of its own.
        display = DISPLAY_MARKER if spec.display_name else ""
        stand_in = dataclasses.replace(
            spec, uuid=UUID_MARKER, name=NAME_MARKER, display_name=display
        )
        shape = (stand_in, context)
        template = self._template(shape, stand_in)
        if template is None:
            return self._design(spec)
        values = {UUID_MARKER: spec.uuid, NAME_MARKER: spec.name, DISPLAY_MARKER: spec.display_name}
        return _MARKERS.sub(lambda found: values[found.group(0)], template)

    def _template(self, shape: Hashable, stand_in: GuestSpec) -> str | None:
        with self._lock:
            if shape in self._templates:
                self._templates.move_to_end(shape)
                return self._templates[shape]
        template = self._checked_template(stand_in)
        with self._lock:
            self._templates[shape] = template
            while len(self._templates) > self._kept:
                self._templates.popitem(last=False)
        return template

    def _checked_template(self, stand_in: GuestSpec) -> str | None:
        """The stand-in's XML, if a second stand-in's is it with the markers replaced
        (the three strings are only ever written as they are); None otherwise."""
        template = self._design(stand_in)
        check = dataclasses.replace(
            stand_in,
            uuid=_CHECK[UUID_MARKER],
            name=_CHECK[NAME_MARKER],
            display_name=_CHECK[DISPLAY_MARKER] if stand_in.display_name else "",
        )
        filled = _MARKERS.sub(lambda found: _CHECK[found.group(0)], template)
        return template if filled == self._design(check) else None


#: The second stand-in's strings (``_checked_template``).
_CHECK: Final = {
    UUID_MARKER: "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d",
    NAME_MARKER: "novaq-template-check-name",
    DISPLAY_MARKER: "novaq-template-check-display",
}
