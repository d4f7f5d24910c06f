"""Images as Nova reads them from Glance: finding an image by id or name, checking that a
flavor can boot it (Nova's ``_validate_flavor_image_nostatus``), the system metadata a
server inherits from it, and the ``ImageSpec`` a compute host boots from.

Refuses to touch image data: the store (copy, checksum, ``qemu-img``) lives in
``workflows/api/images_store.py``; fetching into a host's ``_base`` lives in ``virt/``.
"""

from __future__ import annotations

import uuid as uuid_module
from typing import Any, TypeVar

from sqlalchemy import Row, and_, bindparam, or_, select
from sqlalchemy.orm import Session

from models import Image, ImageStatus
from models.flavor import FlavorSnapshot
from models.tables import table_of
from novaq.exceptions import (
    FlavorDiskSmallerThanImage,
    FlavorDiskSmallerThanMinDisk,
    FlavorMemoryTooSmall,
    ImageNotActive,
    ImageNotFound,
    InvalidInput,
)
from virt.driver import ImageSpec

GiB = 1024**3

#: An image as ``find_image`` returns it, or a row of its columns (``find_image_row``).
_Found = TypeVar("_Found", Image, Row[Any])

# Nova's SM_INHERITABLE_KEYS: image fields (not properties) a server keeps in its
# system metadata as ``image_<key>``.
INHERITED_FIELDS = ("min_ram", "min_disk", "disk_format", "container_format")


def _is_uuid(ref: str) -> bool:
    try:
        uuid_module.UUID(ref)
    except ValueError:
        return False
    return True


#: The image whose id is ``image_id`` and the live ones named ``name``: one statement for
#: both lookups (the id wins over any name), built once.
_IMAGE_BY_REF = (
    select(Image)
    .where(
        or_(
            Image.id == bindparam("image_id"),
            and_(Image.name == bindparam("name"), Image.status != ImageStatus.DELETED),
        )
    )
    .order_by(Image.created_at, Image.id)
)
#: The same, as the table's rows (an ``Image``'s attributes are its columns' names).
_IMAGE_ROWS_BY_REF = _IMAGE_BY_REF.with_only_columns(*table_of(Image).c)

#: An image as ``find_image`` gives it, or as ``find_image_row`` does.
ImageLike = Image | Row[Any]


def find_image(session: Session, ref: Any) -> Image:
    """The image whose id is ``ref`` (deleted ones too: their servers keep their image),
    else the one live image named ``ref``, as the nova client resolves ``--image``. A name
    shared by several live images is refused, naming them."""
    image_id = _image_id(ref)
    return _one(
        list(session.scalars(_IMAGE_BY_REF, {"image_id": image_id, "name": ref})), image_id, ref
    )


def find_image_row(session: Session, ref: Any) -> Row[Any]:
    """``find_image``'s image as a row of its columns, found and refused alike.

    NOTE: what a boot and a build read (``workflows.api.boot``, ``image_spec``): no
    ``Image`` loaded by the ORM. On the connection: nothing pending in a session touches
    ``images`` when they read it (no flush needed)."""
    image_id = _image_id(ref)
    rows = session.connection().execute(_IMAGE_ROWS_BY_REF, {"image_id": image_id, "name": ref})
    return _one(list(rows), image_id, ref)


def _image_id(ref: Any) -> str:
    if not isinstance(ref, str) or not ref:
        raise InvalidInput(reason=f"image must be a name or an id, got {ref!r}")
    return str(uuid_module.UUID(ref)) if _is_uuid(ref) else ref


def _one(found: list[_Found], image_id: str, ref: str) -> _Found:
    by_id = next((image for image in found if image.id == image_id), None)
    if by_id is not None:
        return by_id
    if not found:
        raise ImageNotFound(image_id=ref)
    if len(found) > 1:
        ids = ", ".join(i.id for i in found)
        raise InvalidInput(
            reason=f"Multiple image matches found for {ref!r} ({ids}), "
            "use an ID to be more specific."
        )
    return found[0]


def check_bootable(image: ImageLike, flavor: FlavorSnapshot) -> None:
    """Nova's checks of an image against the flavor at boot, in Nova's order: active,
    memory >= min_ram, then (root_gb > 0 only: 0 means "do not check", as Nova) root disk
    >= the image's size and virtual size, and >= min_disk."""
    if image.status != ImageStatus.ACTIVE:
        raise ImageNotActive(image_id=image.id)
    if flavor.memory_mb < (image.min_ram or 0):
        raise FlavorMemoryTooSmall()
    dest_size = flavor.root_gb * GiB
    if dest_size == 0:
        return
    # NOTE: Nova's API compares the stored size; its libvirt image backend refuses a
    # virtual size larger than the flavor later, on the host. novaq knows the virtual size
    # at upload, so it refuses both here, before anything is written.
    image_size = max(image.size or 0, image.virtual_size or 0)
    if image_size > dest_size:
        raise FlavorDiskSmallerThanImage(flavor_size=dest_size, image_size=image_size)
    min_disk = (image.min_disk or 0) * GiB
    if min_disk > dest_size:
        raise FlavorDiskSmallerThanMinDisk(flavor_size=dest_size, image_min_disk=min_disk)


def system_metadata(image: ImageLike, flavor: FlavorSnapshot) -> dict[str, str]:
    """What a server booted from ``image`` keeps of it (Nova's
    ``get_system_metadata_from_image``): each property as ``image_<name>``, the inherited
    fields (``image_min_disk`` raised to the flavor's root_gb, as Nova does) and
    ``image_base_image_ref``."""
    meta = {f"image_{key}": str(value)[:255] for key, value in (image.properties or {}).items()}
    fields: dict[str, Any] = {
        "min_ram": image.min_ram,
        "min_disk": max(image.min_disk or 0, flavor.root_gb),
        "disk_format": image.disk_format,
        "container_format": image.container_format,
    }
    meta.update({f"image_{key}": str(fields[key]) for key in INHERITED_FIELDS})
    meta["image_base_image_ref"] = image.id
    return meta


def spec_from_image(image: ImageLike) -> ImageSpec:
    return ImageSpec(
        id=image.id,
        name=image.name,
        location=image.location or "",
        disk_format=image.disk_format,
        checksum=image.os_hash_value or "",
        size=image.size or 0,
        virtual_size=image.virtual_size or 0,
        properties=tuple(sorted((k, str(v)) for k, v in (image.properties or {}).items())),
    )


def image_spec(session: Session, image_ref: str) -> ImageSpec:
    """The image an instance boots from, by the ``image_ref`` it recorded at boot (the
    image's id). A deleted image whose row remains still resolves, so its servers keep
    moving and rebooting from their hosts' ``_base`` copies; a purged one raises
    ``ImageNotFound``."""
    if not isinstance(image_ref, str) or not image_ref:
        raise ImageNotFound(image_id=image_ref)
    return spec_from_image(find_image_row(session, image_ref))
