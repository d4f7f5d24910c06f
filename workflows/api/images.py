"""The public API for images: Glance's create, list, show and delete, as Nova sees them.

An image is created ``queued``, its data copied into the store (SHA-256 and size
recorded, format and virtual size read with ``qemu-img``), then made ``active``; any
failure on the way removes the row and the data, so a refused upload leaves nothing.
Deleting an image marks it ``deleted`` and removes its data; servers booted from it keep
working from their hosts' ``_base`` copies, as in Nova.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import uuid as uuid_module
from pathlib import Path
from typing import Annotated, Any

from sqlalchemy import delete as sa_delete
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from compute.images import find_image
from models import Image, ImageStatus, utcnow
from models.db import session_scope
from novaq.exceptions import ImageNotFound, InvalidImage
from novaq.settings import Settings
from workflows.api import common
from workflows.api import images_store as store
from workflows.api.validation import Name, expect, validated

DEMO_IMAGE_BYTES = 1024 * 1024

#: Where the data is: a local file's path or an ``http(s)://`` URL.
Source = Annotated[str | os.PathLike[str], expect("the path of a local file or a URL")]
#: A minimum size (GB of disk, MB of RAM).
Size = Annotated[int, expect("an integer >= 0")]


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def image_dict(image: Image) -> dict[str, Any]:
    return {
        "id": image.id,
        "name": image.name,
        "status": image.status,
        "disk_format": image.disk_format,
        "container_format": image.container_format,
        "size": image.size,
        "virtual_size": image.virtual_size,
        "os_hash_algo": image.os_hash_algo,
        "os_hash_value": image.os_hash_value,
        "min_disk": image.min_disk,
        "min_ram": image.min_ram,
        "properties": dict(image.properties or {}),
        "location": image.location,
        "created_at": _iso(image.created_at),
        "updated_at": _iso(image.updated_at),
        "deleted_at": _iso(image.deleted_at),
    }


def _new_id(image_id: Any) -> str:
    if image_id is None:
        return str(uuid_module.uuid4())
    try:
        return str(uuid_module.UUID(image_id))
    except (TypeError, ValueError, AttributeError):
        raise InvalidImage(reason=f"image id must be a UUID, got {image_id!r}") from None


@validated(items={"properties": "property"}, error=InvalidImage)
def create_image(
    name: Name,
    path: Source | None = None,
    disk_format: str | None = None,
    container_format: str = "bare",
    min_disk: Size = 0,
    min_ram: Size = 0,
    properties: dict[Name, Annotated[str, expect("a string")]] | None = None,
    image_id: str | None = None,
) -> dict[str, Any]:
    """Register the image data at ``path`` (a local file, or an ``http(s)://`` URL to
    fetch; ``disk_format`` raw or qcow2), copied into the store; returns the image,
    ``active``. ``image_id`` chooses the id (Glance's ``--id``); by default a new UUID."""
    upload = store.check_upload(
        name, path, disk_format, container_format, min_disk, min_ram, properties
    )
    return register(common.db_url(), common.settings(), upload, _new_id(image_id))


def register(
    db_url: str, settings: Settings, upload: store.Upload, image_id: str
) -> dict[str, Any]:
    """Queue the image, take its data into the store, make it active; on any failure the
    row is removed again (the store has already removed the data)."""
    exists = InvalidImage(reason=f"an image with id {image_id} already exists")
    try:
        with session_scope(db_url) as session:
            if session.get(Image, image_id) is not None:
                raise exists
            session.add(_queued(image_id, upload))
    except IntegrityError:  # the same id created meanwhile by another request
        raise exists from None
    try:
        data = store.store_data(settings, image_id, upload)
    except BaseException:
        with session_scope(db_url) as session:
            session.execute(sa_delete(Image).where(Image.id == image_id))
        raise
    return _activate(db_url, image_id, data)


def ensure_demo_image(settings: Settings, name: str = "cirros") -> dict[str, Any] | None:
    """Register a tiny image ``name`` (1 MiB of raw zeros, made here: nothing is
    downloaded) unless a live image of that name exists, so a fresh ``novaq up`` or
    ``novaq demo`` can boot servers at once. Returns the new image, or None."""
    db_url = settings.sqlalchemy_url
    with session_scope(db_url, read_only=True) as session:
        live = select(Image.id).where(Image.name == name, Image.status != ImageStatus.DELETED)
        if session.scalars(live).first() is not None:
            return None
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "disk.raw"
        with data.open("wb") as f:
            f.truncate(DEMO_IMAGE_BYTES)
        upload = store.check_upload(name, data, "raw", "bare", 0, 0, None)
        return register(db_url, settings, upload, str(uuid_module.uuid4()))


def _queued(image_id: str, upload: store.Upload) -> Image:
    return Image(
        id=image_id,
        name=upload.name,
        disk_format=upload.disk_format,
        container_format=upload.container_format,
        status=ImageStatus.QUEUED,
        min_disk=upload.min_disk,
        min_ram=upload.min_ram,
        properties=upload.properties,
        os_hash_algo="sha256",
    )


def _activate(db_url: str, image_id: str, data: store.StoredData) -> dict[str, Any]:
    with session_scope(db_url) as session:
        image = session.get(Image, image_id)
        if image is None or image.status != ImageStatus.QUEUED:
            # Deleted while its data was being copied in: the data goes too.
            store.remove_data(data.location)
            raise ImageNotFound(image_id=image_id)
        image.status = ImageStatus.ACTIVE
        image.location = data.location
        image.size = data.size
        image.virtual_size = data.virtual_size
        image.os_hash_value = data.sha256
        image.updated_at = utcnow()
        return image_dict(image)


@validated()
def list_images(include_deleted: bool = False) -> list[dict[str, Any]]:
    """Images, oldest first; deleted ones only when asked (Glance hides them)."""
    query = select(Image).order_by(Image.created_at, Image.id)
    if not include_deleted:
        query = query.where(Image.status != ImageStatus.DELETED)
    with session_scope(common.db_url(), read_only=True) as session:
        return [image_dict(i) for i in session.scalars(query)]


@validated()
def show_image(ref: str) -> dict[str, Any]:
    """An image by id (deleted ones too) or by name (the one live image of that name)."""
    with session_scope(common.db_url(), read_only=True) as session:
        return image_dict(find_image(session, ref))


@validated()
def delete_image(ref: str) -> dict[str, Any]:
    """Mark the image deleted and remove its data from the store."""
    with session_scope(common.db_url()) as session:
        image = find_image(session, ref)
        if image.status == ImageStatus.DELETED:
            raise ImageNotFound(image_id=ref)
        now = utcnow()
        image.status, image.deleted_at, image.updated_at = ImageStatus.DELETED, now, now
        view = image_dict(image)
    store.remove_data(view["location"])
    return view


__all__ = ["create_image", "delete_image", "list_images", "show_image"]
