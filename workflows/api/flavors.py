"""Flavors: validation, creation and lookup (API side)."""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Mapping
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from compute.pci import requests_from_extra_specs
from models import Flavor, FlavorExtraSpec
from models.flavor import FlavorSnapshot
from novaq.exceptions import FlavorExists, FlavorNotFound, InvalidFlavor, InvalidInput
from novaq.settings import Settings
from scheduler.filters.extra_specs_ops import requirement_problem
from workflows.api.extra_specs import name_problem
from workflows.api.validation import MAX_INT, shown, text_problem


def _check_int(name: str, value: int, minimum: int) -> int:
    if value < minimum:
        raise InvalidFlavor(reason=f"{name} must be >= {minimum}, got {value}")
    if value > MAX_INT:  # Nova's db.MAX_INT: the Integer column's limit
        raise InvalidFlavor(reason=f"{name} must be <= {MAX_INT}, got {shown(value)}")
    return value


def check_name(value: str, what: str = "name") -> str:
    """A name the API checked is a string (``workflows.api.validation``); here it must
    also hold more than blanks, fit its column and be printable (``text_problem``): a
    host or a zone reaches here without the ``Name`` annotation."""
    if not value.strip():
        raise InvalidInput(reason=f"{what} must be a non-empty string, got {value!r}")
    problem = text_problem(value)
    if problem is not None:
        raise InvalidInput(reason=f"{what} must be {problem}, got {shown(value)}")
    return value


def validate_extra_specs(
    extra_specs: Mapping[str, str | int | float] | None, settings: Settings
) -> dict[str, str]:
    if extra_specs is None:
        return {}
    specs = {}
    for key, value in extra_specs.items():
        if not key or text_problem(key) is not None:
            raise InvalidFlavor(
                reason=f"extra spec key {shown(key)} must be 1 to 255 printable characters"
            )
        unknown = name_problem(key)
        if unknown is not None:
            raise InvalidFlavor(reason=f"extra spec key {key!r} must be {unknown}")
        text = str(value)
        problem = text_problem(text, minimum=0) or requirement_problem(text)
        if problem is not None:
            raise InvalidFlavor(reason=f"extra spec {key} must be {problem}, got {shown(text)}")
        specs[key] = text
    requests_from_extra_specs(specs, settings)  # refuses unknown aliases, malformed counts
    return specs


def create_flavor(
    session: Session,
    name: str,
    vcpus: int,
    memory_mb: int,
    root_gb: int,
    ephemeral_gb: int = 0,
    swap: int = 0,
    extra_specs: Mapping[str, str | int | float] | None = None,
    *,
    settings: Settings,
) -> Flavor:
    name = check_name(name, "flavor name")
    flavor = Flavor(
        flavorid=str(uuid_module.uuid4()),
        name=name,
        vcpus=_check_int("vcpus", vcpus, 1),
        memory_mb=_check_int("memory_mb", memory_mb, 1),
        root_gb=_check_int("root_gb", root_gb, 0),
        ephemeral_gb=_check_int("ephemeral_gb", ephemeral_gb, 0),
        swap=_check_int("swap", swap, 0),
    )
    specs = validate_extra_specs(extra_specs, settings)
    if session.scalars(select(Flavor.id).where(Flavor.name == name)).first() is not None:
        raise FlavorExists(name=name)
    flavor.extra_specs = [FlavorExtraSpec(key=k, value=v) for k, v in specs.items()]
    session.add(flavor)
    session.flush()
    return flavor


def get_flavor(session: Session, ref: str) -> Flavor:
    """A flavor by name or flavor id."""
    if not ref:
        raise InvalidInput(reason=f"flavor must be a flavor name or id, got {ref!r}")
    flavor = session.scalars(
        select(Flavor).where(or_(Flavor.name == ref, Flavor.flavorid == ref))
    ).first()
    if flavor is None or flavor.disabled:
        raise FlavorNotFound(flavor=ref)
    return flavor


def flavor_dict(flavor: Flavor) -> dict[str, Any]:
    """A flavor as the API shows it: its snapshot's stored form."""
    return FlavorSnapshot.from_row(flavor).dump()
