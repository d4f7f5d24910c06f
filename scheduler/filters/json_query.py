"""The ``query`` hint's language (Nova's JsonFilter): read, checked and evaluated.

A query is a JSON list ``[operator, argument, ...]``. The operators: ``=``, ``<``, ``>``,
``<=``, ``>=`` (the first argument against every other one: true only if every
comparison holds, false with fewer than two arguments), ``in`` (the first argument is one
of the others), ``not`` (each argument negated: a list), ``or``, ``and``. An argument is
a nested query (evaluated first; an empty one is true), a string ``$name`` or
``$name.key.key`` (a host state attribute, then dictionary keys), any other string, or
another JSON value. An argument that is ``null``, an empty string or a ``$name`` the host
has no value for is left out, as Nova leaves it out.

``check_query`` is what the API refuses before anything is written: text that is not
JSON, a query that is not a list (Nova's filter raises on one, or reads a JSON string's
characters as a query), an unknown operator, nesting deeper than ``MAX_DEPTH``. An empty
query (``[]``, ``null``, ``""``, ``{}``) is no query. A ``$name`` no host has is not
refused: Nova leaves it out, so a comparison with it is false.

``evaluate`` raises ``TypeError`` or ``AttributeError`` where Nova's does (``<`` between
a number and a string; ``$free_ram_mb.key``): the filter refuses that host.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 100
MAX_LENGTH = 65535

Resolve = Callable[[str], Any]


def _compare(op: Callable[[Any, Any], Any]) -> Callable[[list[Any]], Any]:
    def check(args: list[Any]) -> bool:
        if len(args) < 2:
            return False
        # NOTE: every comparison is made, as Nova makes them: one that raises makes the
        # query raise even after one that failed.
        failed = [arg for arg in args[1:] if not op(args[0], arg)]
        return not failed

    return check


def _in(args: list[Any]) -> bool:
    return len(args) >= 2 and args[0] in args[1:]


OPERATORS: dict[str, Callable[[list[Any]], Any]] = {
    "=": _compare(operator.eq),
    "<": _compare(operator.lt),
    ">": _compare(operator.gt),
    "in": _in,
    "<=": _compare(operator.le),
    ">=": _compare(operator.ge),
    "not": lambda args: [not arg for arg in args],
    "or": any,
    "and": all,
}


def check_query(text: str) -> Any:
    """The query ``text`` holds, checked (``ValueError`` saying why it is refused)."""
    if len(text) > MAX_LENGTH:
        raise ValueError(f"at most {MAX_LENGTH} characters, got {len(text)}")
    try:
        query = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if query and not isinstance(query, list):
        raise ValueError(
            f'a JSON list such as [">=", "$free_ram_mb", 1024], got {type(query).__name__}'
        )
    _check(query, 1)
    return query


def _check(query: Any, depth: int) -> None:
    if not query:
        return
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} queries")
    head = query[0]
    if not isinstance(head, str) or head not in OPERATORS:
        known = " ".join(OPERATORS)
        raise ValueError(f"unknown operator {head!r} (known: {known})")
    for arg in query[1:]:
        if isinstance(arg, list):
            _check(arg, depth + 1)


@functools.lru_cache(maxsize=256)
def parsed(text: str) -> Any:
    """``check_query(text)``, read once per distinct text (the filter asks per host)."""
    return check_query(text)


def evaluate(query: Any, resolve: Resolve) -> Any:
    """The value of a checked query, ``$name`` looked up with ``resolve`` (None: the
    host has no such attribute)."""
    if not query:
        return True
    args = []
    for arg in query[1:]:
        if isinstance(arg, list):
            arg = evaluate(arg, resolve)
        elif isinstance(arg, str):
            arg = _value(arg, resolve)
        if arg is not None:
            args.append(arg)
    return OPERATORS[query[0]](args)


def _value(text: str, resolve: Resolve) -> Any:
    if not text:
        return None
    if not text.startswith("$"):
        return text
    name, *keys = text[1:].split(".")
    found = resolve(name)
    for key in keys:
        if found is None:
            return None
        found = found.get(key, None)  # AttributeError where Nova's raises one too
    return found
