"""The scheduler hints that name no server, checked as Nova's API schema checks them
(``os:scheduler_hints``), and a little more where Nova's filter would only fail later:

- ``query`` (JsonFilter): a JSON text (a list or mapping is taken as its JSON text, as
  Nova's schema takes an object); refused unless it is a query
  (``scheduler.filters.json_query.check_query``: Nova's API takes any text, and its
  filter then fails the whole request on one that is not JSON or names an unknown
  operator).
- ``build_near_host_ip`` (SimpleCIDRAffinityFilter): an IPv4 or IPv6 address.
- ``cidr``: ``/`` then digits, lowercase hex, dots or colons (Nova's pattern), and a
  network with the address (``/33`` is refused for an IPv4 one: Nova's filter raises).

Each is stored as a list of one string, as Nova's request spec stores hints.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from novaq.exceptions import InvalidInput
from scheduler.filters.json_query import check_query
from scheduler.filters.simple_cidr_affinity_filter import (
    CIDR_HINT,
    NEAR_HINT,
    affinity_network,
)

QUERY_HINT = "query"
#: Nova's API schema for the ``cidr`` hint.
CIDR_PATTERN = re.compile(r"^/[0-9a-f.:]+$")
_EXPECTED = "expected"


def _refuse(phrase: str) -> PydanticCustomError:
    # The phrase goes in the context: a query's text may hold braces.
    return PydanticCustomError(_EXPECTED, "{phrase}", {"phrase": phrase})


def _query(value: Any) -> str:
    if isinstance(value, list | dict):
        value = json.dumps(value)
    if not isinstance(value, str):
        raise _refuse("a JSON query (a string)")
    try:
        check_query(value)
    except ValueError as exc:
        raise _refuse(f"a JSON query: {exc}") from None
    return value


def _address(value: Any) -> str:
    if not isinstance(value, str):
        raise _refuse("an IPv4 or IPv6 address (a string)")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise _refuse("an IPv4 or IPv6 address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        raise _refuse("an IPv4 or IPv6 address (no scope)")
    return value


def _cidr(value: Any) -> str:
    if not isinstance(value, str) or not CIDR_PATTERN.match(value):
        raise _refuse("'/' and a prefix length or mask, such as /24 or /255.255.255.0")
    for version_address in ("0.0.0.0", "::"):
        try:
            affinity_network(version_address, value)
            return value
        except ValueError:
            continue
    raise _refuse("a prefix length or a mask of IPv4 or IPv6, such as /24 or /64")


#: A JSON text; JSON data (a list or a mapping) is taken as its text.
Query = Annotated[str | list[Any] | dict[str, Any], BeforeValidator(_query)]
Address = Annotated[str, BeforeValidator(_address)]
Cidr = Annotated[str, BeforeValidator(_cidr)]


def host_hints(hints: dict[str, Any]) -> dict[str, list[str]]:
    """``query``, ``build_near_host_ip`` and ``cidr`` of ``hints`` (already checked one by
    one by their annotations), as stored; a cidr the address has no network for is
    refused here."""
    found = {k: hints[k] for k in (QUERY_HINT, NEAR_HINT, CIDR_HINT) if k in hints}
    if NEAR_HINT in found and CIDR_HINT in found:
        try:
            affinity_network(found[NEAR_HINT], found[CIDR_HINT])
        except ValueError as exc:
            raise InvalidInput(
                reason=f"scheduler hint cidr {found[CIDR_HINT]!r} does not fit "
                f"build_near_host_ip {found[NEAR_HINT]!r}: {exc}",
                field="hints",
            ) from None
    return {key: [value] for key, value in found.items()}
