"""``img_hv_requested_version``: a comma-separated list of ``<op> <version>`` clauses, read
as Nova reads it (oslo.utils' ``VersionPredicate``): each operand is a PEP 440 version
(``9``, ``6.0``, ``6.0rc1``), and the host's version, stored as Nova stores it
(``major*1e6 + minor*1e3 + micro``), is spelt back with dots (``7002022`` → ``7.2.22``)
before the comparison. So ``"< 9"`` means below version 9, and ``">=6000000"`` means at
least version 6,000,000, which no hypervisor is.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Final

from packaging.version import InvalidVersion, Version

_CLAUSE: Final = re.compile(r"^\s*(<=|>=|<|>|!=|==)\s*(\S+)\s*$")
_COMPARE: Final[dict[str, Callable[[Version, Version], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "!=": operator.ne,
}

Predicate = tuple[tuple[Callable[[Version, Version], bool], Version], ...]


def parse(requested: str) -> Predicate:
    """The clauses of ``requested``, or ValueError naming the first that Nova's image
    metadata would refuse (no operator, ``=``, an operand that is no version)."""
    clauses = []
    for clause in requested.split(","):
        match = _CLAUSE.match(clause)
        if match is None:
            raise ValueError(
                f"{clause.strip()!r} is not '<op> <version>' (op: {', '.join(_COMPARE)})"
            )
        op, operand = match.groups()
        try:
            clauses.append((_COMPARE[op], Version(operand)))
        except InvalidVersion:
            raise ValueError(f"{operand!r} is not a version") from None
    return tuple(clauses)


def as_version(encoded: int) -> Version:
    """A hypervisor version as Nova stores it, as a version (oslo.utils'
    ``convert_version_to_str``: groups of three digits, leading zero groups dropped)."""
    parts: list[int] = []
    while encoded:
        encoded, part = divmod(encoded, 1000)
        parts.insert(0, part)
    return Version(".".join(map(str, parts)) or "0")


def satisfied_by(predicate: Predicate, hypervisor_version: int) -> bool:
    have = as_version(hypervisor_version)
    return all(compare(have, wanted) for compare, wanted in predicate)
