"""The base of novaq's libvirt XML objects and the small lxml helpers they share.

No policy and no libvirt calls: ``LibvirtConfigObject`` gives every object its string
forms; the helpers read required elements and attributes with a clear ``ValueError``.
"""

from __future__ import annotations

from typing import ClassVar, Final, Self

from lxml import etree

_MEMORY_UNITS: Final[dict[str, int]] = {
    "b": 1,
    "bytes": 1,
    "KiB": 1024,
    "k": 1024,
    "MiB": 1024**2,
    "M": 1024**2,
    "GiB": 1024**3,
    "G": 1024**3,
}


def _leaf(parent: etree._Element, tag: str, text: object, **attrs: str) -> etree._Element:
    element = etree.SubElement(parent, tag, attrs)
    element.text = str(text)
    return element


def _required(element: etree._Element, path: str) -> etree._Element:
    found = element.find(path)
    if found is None:
        raise ValueError(f"<{element.tag!s}> has no {path}")
    return found


def _text(element: etree._Element, path: str) -> str:
    return _required(element, path).text or ""


def _attr(element: etree._Element, name: str) -> str:
    value = element.get(name)
    if value is None:
        raise ValueError(f"<{element.tag!s}> has no {name} attribute")
    return value


def memory_kib(element: etree._Element) -> int:
    """A libvirt memory element (``unit`` attribute, KiB by default) in KiB."""
    scale = _MEMORY_UNITS[element.get("unit", "KiB")]
    return int(element.text or "0") * scale // 1024


class LibvirtConfigObject:
    """An XML object: ``to_element()``, ``from_element()`` and their string forms."""

    root_name: ClassVar[str]

    def to_element(self) -> etree._Element:
        raise NotImplementedError

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        raise NotImplementedError

    def to_xml(self) -> str:
        return etree.tostring(self.to_element(), pretty_print=True, encoding="unicode")

    @classmethod
    def from_xml(cls, xml: str) -> Self:
        return cls.from_element(etree.fromstring(xml.encode()))
