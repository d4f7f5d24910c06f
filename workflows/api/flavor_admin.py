"""The public API for a flavor's life after create: show, delete, extra specs, and
which projects may use a private one (Nova's ``flavor-show``, ``flavor-delete``,
``flavor-key`` and ``flavor-access-*``). ``create_flavor`` and ``list_flavors`` are in
``workflows.api.servers``.

A flavor is named by its name or its flavor id. Every call checks everything before it
writes, so a refused one changes nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from models.db import session_scope
from workflows.api import common, flavors
from workflows.api.validation import Name, expect, validated

#: An extra spec's value: a string (a number is taken as its string).
SpecValue = Annotated[str | int | float, expect("a string")]


@validated()
def show_flavor(flavor: Name) -> dict[str, Any]:
    """A flavor by name or id: its sizes, extra specs and whether it is public."""
    with session_scope(common.db_url(), read_only=True) as session:
        return flavors.flavor_dict(flavors.get_flavor(session, flavor))


@validated()
def delete_flavor(flavor: Name) -> dict[str, Any]:
    """Delete a flavor, in use or not, as Nova allows: servers keep their own copy of it
    (show, resize, revert and the audit go on as before); returns the deleted flavor."""
    with session_scope(common.db_url()) as session:
        row = flavors.get_flavor(session, flavor)
        view = flavors.flavor_dict(row)
        flavors.delete_flavor(row)
        return view


@validated(items={"extra_specs": "extra spec"})
def set_flavor_extra_specs(flavor: Name, extra_specs: dict[Name, SpecValue]) -> dict[str, Any]:
    """Add or change extra specs (``flavor-key <flavor> set k=v``), validated as at create.
    Servers already built keep the specs they were built with."""
    with session_scope(common.db_url()) as session:
        row = flavors.get_flavor(session, flavor)
        flavors.set_extra_specs(row, extra_specs, common.settings())
        session.flush()
        return flavors.flavor_dict(row)


@validated()
def unset_flavor_extra_specs(flavor: Name, keys: list[Name]) -> dict[str, Any]:
    """Remove extra specs (``flavor-key <flavor> unset k``); each must be set."""
    with session_scope(common.db_url()) as session:
        row = flavors.get_flavor(session, flavor)
        flavors.unset_extra_specs(row, keys)
        session.flush()
        return flavors.flavor_dict(row)


@validated()
def list_flavor_access(flavor: Name) -> list[dict[str, str]]:
    """The projects that may use a private flavor (refused for a public one, as Nova)."""
    with session_scope(common.db_url(), read_only=True) as session:
        return flavors.access_list(flavors.get_flavor(session, flavor))


@validated()
def add_flavor_access(flavor: Name, project: Name) -> list[dict[str, str]]:
    """Let ``project`` use a private flavor; returns the access list."""
    with session_scope(common.db_url()) as session:
        row = flavors.get_flavor(session, flavor)
        flavors.add_access(row, project)
        session.flush()
        return flavors.access_list(row)


@validated()
def remove_flavor_access(flavor: Name, project: Name) -> list[dict[str, str]]:
    """Take a private flavor away from ``project``; returns the access list."""
    with session_scope(common.db_url()) as session:
        row = flavors.get_flavor(session, flavor)
        flavors.remove_access(row, project)
        session.flush()
        return flavors.access_list(row)


__all__ = [
    "add_flavor_access",
    "delete_flavor",
    "list_flavor_access",
    "remove_flavor_access",
    "set_flavor_extra_specs",
    "show_flavor",
    "unset_flavor_extra_specs",
]
