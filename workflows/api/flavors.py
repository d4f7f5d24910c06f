"""Flavors: validation, creation, lookup, soft delete, extra specs and project access
(API side). The public calls are in ``workflows.api.flavor_admin`` and ``servers``."""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session, joinedload, lazyload

from compute.pci import requests_from_extra_specs
from models import Flavor, FlavorExtraSpec, utcnow
from models.flavor import FlavorProject, FlavorSnapshot
from novaq.exceptions import FlavorExists, FlavorNotFound, InvalidFlavor, InvalidInput, NotFound
from novaq.settings import Settings
from scheduler.filters.extra_specs_ops import requirement_problem
from workflows.api.extra_spec_values import value_problem
from workflows.api.extra_specs import name_problem
from workflows.api.validation import MAX_INT, shown, text_problem


class FlavorAccessExists(InvalidInput):
    msg_fmt = (
        "Flavor access already exists for flavor %(flavor_id)s and project %(project_id)s "
        "combination."
    )


class FlavorAccessNotFound(NotFound):
    msg_fmt = "Flavor access not found for %(flavor_id)s / %(project_id)s combination."


class FlavorIsPublic(InvalidInput):
    """Nova's 409 on adding access to a public flavor, its 404 on listing it."""

    msg_fmt = "Flavor %(flavor_id)s is public: %(reason)s"


class FlavorExtraSpecsNotFound(NotFound):
    msg_fmt = "Flavor %(flavor_id)s has no extra specs with key %(extra_specs_key)s."


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
        problem = (
            text_problem(text, minimum=0) or value_problem(key, text) or requirement_problem(text)
        )
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
    is_public: bool = True,
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
        is_public=is_public,
    )
    specs = validate_extra_specs(extra_specs, settings)
    live_name = select(Flavor.id).where(Flavor.name == name, Flavor.deleted == 0)
    if session.scalars(live_name).first() is not None:
        raise FlavorExists(name=name)
    flavor.extra_specs = [FlavorExtraSpec(key=k, value=v) for k, v in specs.items()]
    session.add(flavor)
    session.flush()
    return flavor


#: A live flavor by name or flavor id (``ref``).
#: NOTE: one statement, not three: the extra specs joined, the projects read only for a
#: private flavor and a project (``may_use``). Every caller reads them in its session.
#: Built once: building it (its options and comparisons) took longer than running it.
_FLAVOR_BY_REF = (
    select(Flavor)
    .where(
        or_(Flavor.name == bindparam("ref"), Flavor.flavorid == bindparam("ref")),
        Flavor.deleted == 0,
    )
    .options(joinedload(Flavor.extra_specs), lazyload(Flavor.projects))
)


def _check_lookup(ref: str, project: str | None) -> None:
    """The input of a flavor lookup (``get_flavor``, ``get_snapshot``), refused as bad."""
    if not ref:
        raise InvalidInput(reason=f"flavor must be a flavor name or id, got {ref!r}")
    if project is not None:
        check_name(project, "project")


def get_flavor(session: Session, ref: str, project: str | None = None) -> Flavor:
    """A live flavor by name or flavor id. Given a ``project``, a private flavor that
    project has no access to is not found, as Nova hides it from the project; without
    one the caller is the operator, who sees every flavor (Nova's admin)."""
    _check_lookup(ref, project)
    flavor = session.scalars(_FLAVOR_BY_REF, {"ref": ref}).unique().first()
    if flavor is None or flavor.disabled or not may_use(flavor, project):
        raise FlavorNotFound(flavor=ref)
    return flavor


#: ``_FLAVOR_BY_REF`` as columns (a row per extra spec): what a boot reads of its flavor.
_FLAVOR_ROWS_BY_REF = (
    select(
        Flavor.id,
        Flavor.flavorid,
        Flavor.name,
        Flavor.vcpus,
        Flavor.memory_mb,
        Flavor.root_gb,
        Flavor.ephemeral_gb,
        Flavor.swap,
        Flavor.disabled,
        Flavor.is_public,
        FlavorExtraSpec.key,
        FlavorExtraSpec.value,
    )
    .outerjoin(FlavorExtraSpec, FlavorExtraSpec.flavor_id == Flavor.id)
    .where(
        or_(Flavor.name == bindparam("ref"), Flavor.flavorid == bindparam("ref")),
        Flavor.deleted == 0,
    )
)
_FLAVOR_PROJECTS = select(FlavorProject.project_id).where(
    FlavorProject.flavor_id == bindparam("flavor")
)


def get_snapshot(
    session: Session, ref: str, project: str | None = None
) -> tuple[FlavorSnapshot, int]:
    """``get_flavor``'s flavor as its snapshot and row id, found and refused as it is.

    NOTE: the rows as columns, no ``Flavor`` loaded with its extra specs: that ORM load
    was about a tenth of a boot's API call. The projects are read only when
    ``may_use`` would read them (a private flavor and a project)."""
    _check_lookup(ref, project)
    rows = session.execute(_FLAVOR_ROWS_BY_REF, {"ref": ref}).all()
    if not rows:
        raise FlavorNotFound(flavor=ref)
    first = rows[0]  # the first flavor found, as ``get_flavor``'s ``first()``
    flavor_id, disabled, is_public = first.id, first.disabled, first.is_public
    if disabled or not (is_public or project is None or project in _projects(session, flavor_id)):
        raise FlavorNotFound(flavor=ref)
    snapshot = FlavorSnapshot(
        flavorid=first.flavorid,
        name=first.name,
        vcpus=first.vcpus,
        memory_mb=first.memory_mb,
        root_gb=first.root_gb,
        ephemeral_gb=first.ephemeral_gb,
        swap=first.swap,
        extra_specs={r.key: r.value for r in rows if r.id == flavor_id and r.key is not None},
    )
    return snapshot, flavor_id


def _projects(session: Session, flavor_id: int) -> set[str]:
    return set(session.scalars(_FLAVOR_PROJECTS, {"flavor": flavor_id}))


def list_flavors(session: Session, is_public: bool | None = True) -> list[Flavor]:
    """Live, enabled flavors; ``is_public`` None for public and private alike."""
    query = select(Flavor).where(Flavor.disabled.is_(False), Flavor.deleted == 0)
    if is_public is not None:
        query = query.where(Flavor.is_public.is_(is_public))
    return list(session.scalars(query.order_by(Flavor.id)))


def may_use(flavor: Flavor, project: str | None) -> bool:
    """Whether ``project`` (None: the operator) may boot or resize with ``flavor``."""
    if flavor.is_public or project is None:
        return True
    return project in {p.project_id for p in flavor.projects}


def flavor_dict(flavor: Flavor) -> dict[str, Any]:
    """A flavor as the API shows it: its snapshot's stored form, and whether it is public."""
    return {**FlavorSnapshot.from_row(flavor).dump(), "is_public": flavor.is_public}


def delete_flavor(flavor: Flavor) -> None:
    """Soft-delete ``flavor``: servers built with it keep their own copy of it (their
    ``flavor`` snapshot, and their move's old and new flavors), so show, resize-revert and
    the audit never read this row again; the name is free for a new flavor."""
    flavor.deleted = flavor.id
    flavor.deleted_at = utcnow()


def set_extra_specs(
    flavor: Flavor, extra_specs: Mapping[str, str | int | float], settings: Settings
) -> None:
    """Add or change extra specs, validated as at create (Nova's namespaces, operators,
    PCI aliases) on the flavor's whole resulting set; nothing changes if one is refused."""
    if not extra_specs:
        raise InvalidInput(reason="extra_specs must be a non-empty mapping")
    merged = validate_extra_specs({**flavor.extra_specs_dict, **extra_specs}, settings)
    rows = {spec.key: spec for spec in flavor.extra_specs}
    for key in extra_specs:
        if key in rows:
            rows[key].value = merged[key]
        else:
            flavor.extra_specs.append(FlavorExtraSpec(key=key, value=merged[key]))
    flavor.updated_at = utcnow()


def unset_extra_specs(flavor: Flavor, keys: list[str]) -> None:
    """Remove extra specs; a key the flavor has not is refused (Nova's 404) before any
    is removed."""
    if not keys:
        raise InvalidInput(reason="keys must be a non-empty list")
    rows = {spec.key: spec for spec in flavor.extra_specs}
    for key in keys:
        if key not in rows:
            raise FlavorExtraSpecsNotFound(flavor_id=flavor.flavorid, extra_specs_key=key)
    for key in dict.fromkeys(keys):
        flavor.extra_specs.remove(rows[key])
    flavor.updated_at = utcnow()


def access_list(flavor: Flavor) -> list[dict[str, str]]:
    """The projects that may use a private flavor, as Nova's ``flavor_access`` list."""
    if flavor.is_public:
        raise FlavorIsPublic(
            flavor_id=flavor.flavorid, reason="access list not available for public flavors"
        )
    return [{"flavor_id": flavor.flavorid, "tenant_id": p.project_id} for p in flavor.projects]


def add_access(flavor: Flavor, project: str) -> None:
    check_name(project, "project")
    if flavor.is_public:
        raise FlavorIsPublic(
            flavor_id=flavor.flavorid, reason="can not add access to a public flavor"
        )
    if project in {p.project_id for p in flavor.projects}:
        raise FlavorAccessExists(flavor_id=flavor.flavorid, project_id=project)
    flavor.projects.append(FlavorProject(project_id=project))


def remove_access(flavor: Flavor, project: str) -> None:
    check_name(project, "project")
    found = [p for p in flavor.projects if p.project_id == project]
    if not found:
        raise FlavorAccessNotFound(flavor_id=flavor.flavorid, project_id=project)
    flavor.projects.remove(found[0])
