"""Nova's extra-spec operators: how a flavor requirement such as ``">= 4"`` or
``"<in> avx2"`` is compared with a host's (or an aggregate's) value.

The first word of the requirement names the operator; if it is not one, the whole
requirement must equal the value. Numeric operators compare as floats, ``s``-prefixed ones
as strings. A value that cannot be read as a number never matches a numeric operator
(Nova would raise; a filter must not take the scheduler down for one odd host).
"""

from __future__ import annotations

import logging
import operator
import re
from collections.abc import Callable

LOG = logging.getLogger(__name__)

OR = "<or>"
ALL_IN = "<all-in>"


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def check(value: str, wanted: str) -> bool:
        return compare(float(value), float(wanted))

    return check


_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    # NOTE: a bare "=" means "at least", as in Nova ("= 4" passes a host with 8).
    "=": _numeric(operator.ge),
    "==": _numeric(operator.eq),
    "!=": _numeric(operator.ne),
    ">=": _numeric(operator.ge),
    "<=": _numeric(operator.le),
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
    "<in>": lambda value, wanted: wanted in value,
}


def match(value: str | None, req: str) -> bool:
    """Whether ``value`` satisfies the requirement ``req`` (e.g. ``"s== kvm"``)."""
    words = req.split()
    op = words.pop(0) if words else None
    if op not in _OPERATORS and op not in (OR, ALL_IN):
        return value == req
    if value is None:
        return False
    if op == OR:
        return _match_any(value, words)
    if not words:
        return False
    if op == ALL_IN:
        return all(word in value for word in words)
    try:
        return _OPERATORS[op](value, words[0])
    except ValueError:
        LOG.debug("%r is not a number for requirement %r", value, req)
        return False


def _match_any(value: str, words: list[str]) -> bool:
    """``<or> a <or> b``: ``words`` alternate between candidates and ``<or>`` keywords."""
    return value in words[::2]


#: A first word that looks like an operator but is none of Nova's (``=>``, ``<``, ``s=``,
#: ``<not-in>``): the filters would take it for a literal value and never match.
_OPERATOR_LIKE = re.compile(r"^(s?[<>=!]+|<[a-z-]+>)$")
_NUMERIC = ("=", "==", "!=", ">=", "<=")


def requirement_problem(req: str) -> str | None:
    """Why the filters cannot evaluate ``req`` as Nova's would (None if they can): an
    unknown operator, an operator with no operand, a numeric operator whose operand is not
    a number. A requirement not starting with an operator is a literal value: fine."""
    words = req.split()
    if not words:
        return None
    op, operands = words[0], words[1:]
    if op not in _OPERATORS and op not in (OR, ALL_IN):
        if _OPERATOR_LIKE.match(op):
            return f"one of Nova's operators ({', '.join([*_OPERATORS, OR, ALL_IN])}), not {op!r}"
        return None
    if not operands:
        return f"an operator with its operand, not {op!r} alone"
    if op in _NUMERIC:
        try:
            float(operands[0])
        except ValueError:
            return f"a number after {op!r}"
    if op == OR and any(word != OR for word in operands[1::2]):
        return "values separated by '<or>'"
    return None
