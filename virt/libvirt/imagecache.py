"""The local cache of base images under ``<instances_path>/<[image_cache] subdirectory_name>``
and its manager: Nova's ``nova/virt/libvirt/imagecache.py`` on novaq's stand-in images.

A base image is the file ``<base_dir>/<sha1 of the image ref>``, as Nova names the
original it streams from Glance. novaq has no image service, so "fetching" an image
writes a small JSON file recording the image's name instead of gigabytes; its mtime is
when it was fetched or last used, which is all the manager reads. ``spawn`` fetches
(or touches) the base image of the guest's image; ``ImageCache.update`` is one pass of
the manager, with Nova's rules: a base file used by an instance of this host is kept and
its mtime set to now; an unused one is removed, when ``remove_unused_base_images`` is
on, once its mtime is ``remove_unused_original_minimum_age_seconds`` old; a used image
with no base file is reported (Nova warns).

Differs from Nova, and why: only originals (40 hex digits) exist here, so there are no
resized (``<sha1>_<size>``) or swap base files, no checksums and no backing files to
read (whether an image is used comes from the database, as Nova's ``used_images``
does); other files in the directory are left alone. The per-file lock Nova takes from
``lockutils`` is one ``flock`` on ``<instances_path>/locks/image-cache``, held while a
spawn fetches and while a pass rechecks an unused file's age and removes it, so a base
file a spawn just touched is never removed under it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from virt.driver import ImageCacheReport

LOG = logging.getLogger(__name__)

DEFAULT_SUBDIRECTORY: Final = "_base"
LOCKS_DIR: Final = "locks"
_ORIGINAL = re.compile(r"^[0-9a-f]{40}$")


def cache_file_name(image_ref: str) -> str:
    """Nova's ``get_cache_fname``: the SHA-1 of the image id, in hex."""
    return hashlib.sha1(image_ref.encode("utf-8")).hexdigest()


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing), across threads and processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ImageCache:
    """The base images of one ``instances_path``."""

    def __init__(self, instances_path: Path, subdirectory: str = DEFAULT_SUBDIRECTORY) -> None:
        self.base_dir = instances_path / subdirectory
        self._lock_path = instances_path / LOCKS_DIR / "image-cache"

    def base_file(self, image_ref: str) -> Path:
        return self.base_dir / cache_file_name(image_ref)

    def fetch(self, image_ref: str) -> Path:
        """Make sure the base image of ``image_ref`` is here; either way it is used now."""
        path = self.base_file(image_ref)
        with file_lock(self._lock_path):
            if path.exists():
                os.utime(path)
            else:
                self.base_dir.mkdir(parents=True, exist_ok=True)
                _write_atomically(path, json.dumps({"image": image_ref}) + "\n")
                LOG.info("image %s: fetched into the cache at %s", image_ref, path)
        return path

    def update(
        self, images_in_use: Collection[str], *, remove_unused: bool, min_age_s: int
    ) -> ImageCacheReport:
        """One pass of the manager (Nova's ``ImageCacheManager.update``)."""
        originals = self._list_base_images()
        in_use, missing = self._age_used_images(set(images_in_use) - {""}, originals)
        removable = sorted(originals.values())
        if removable:
            LOG.info("Removable base files: %s", " ".join(str(p) for p in removable))
        removed: list[str] = []
        kept: list[str] = []
        for path in removable:
            name = _image_name(path)
            done = remove_unused and self._remove_old_enough_file(path, min_age_s)
            (removed if done else kept).append(name)
        LOG.debug("Verification complete")
        return ImageCacheReport(tuple(in_use), tuple(missing), tuple(removed), tuple(kept))

    def _list_base_images(self) -> dict[str, Path]:
        """The originals in the base directory, by file name."""
        if not self.base_dir.is_dir():
            LOG.debug("Skipping verification, no base directory at %s", self.base_dir)
            return {}
        return {
            entry.name: entry
            for entry in self.base_dir.iterdir()
            if _ORIGINAL.match(entry.name) and entry.is_file()
        }

    def _age_used_images(
        self, images: set[str], originals: dict[str, Path]
    ) -> tuple[list[str], list[str]]:
        """Touch the base file of each used image (taking it out of ``originals``)."""
        in_use, missing = [], []
        for image_ref in sorted(images):
            path = originals.pop(cache_file_name(image_ref), None)
            if path is None:
                LOG.warning(
                    "image %s at (%s): warning -- an absent base file is in use!",
                    image_ref,
                    self.base_file(image_ref),
                )
                missing.append(image_ref)
                continue
            LOG.info("image %s at (%s): in use on this node", image_ref, path)
            _touch(path)
            in_use.append(image_ref)
        return in_use, missing

    def _remove_old_enough_file(self, path: Path, min_age_s: int) -> bool:
        """Remove ``path`` if unused for ``min_age_s``; the age is read again under the lock,
        because a spawn may have just used the image (Nova's recheck)."""
        with file_lock(self._lock_path):
            try:
                age_s = time.time() - path.stat().st_mtime
            except FileNotFoundError:
                return False
            if age_s < min_age_s:
                LOG.info("Base or swap file too young to remove: %s", path)
                return False
            LOG.info("Removing base or swap file: %s", path)
            try:
                path.unlink()
            except OSError as exc:
                LOG.error("Failed to remove %s, error was %s", path, exc)
                return False
        return True


def _touch(path: Path) -> None:
    # A file removed meanwhile is fetched again by the next spawn that needs it.
    with contextlib.suppress(FileNotFoundError):
        os.utime(path)


def _image_name(path: Path) -> str:
    """The image a base file holds, as recorded at fetch; its file name if unreadable."""
    try:
        name = json.loads(path.read_text(encoding="utf-8"))["image"]
    except (OSError, ValueError, KeyError, TypeError):
        return path.name
    return name if isinstance(name, str) else path.name


def _write_atomically(path: Path, content: str) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
