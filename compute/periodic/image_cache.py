"""``_run_image_cache_manager_pass``: age and clean this host's local cache of base images
(NOVA_BEHAVIOUR.md §7.2; the cache itself is ``virt.libvirt.imagecache``).

Nova first registers the host as a user of ``instances_path`` (``storage_users``), so that
on shared storage every host's instances count as users of the one cache, then hands the
driver the non-deleted instances (SOFT_DELETED included) of all those hosts. In novaq each
host has its own instances path (``<state_dir>/instances/<host>``, or
``[libvirt] instances_path/<host>``), so the hosts sharing it are this host alone and the
images in use are the ``image_ref`` of the non-deleted instances whose ``host`` is this
one. The driver then keeps (and marks used) their base files and, when
``[image_cache] remove_unused_base_images`` is on, removes the others once unused for
``remove_unused_original_minimum_age_seconds``. Spacing: ``[image_cache]
manager_interval``. Unused ephemeral and swap bases go by the same rule (the driver
knows which ones its guests' disks use). An image of a server that moved away is no
longer in use here; if a revert brings the server back, it fetches the image again.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.periodic import PeriodicContext
from models import Instance

LOG = logging.getLogger(__name__)


def run_image_cache_manager_pass(ctx: PeriodicContext) -> dict[str, Any]:
    with ctx.sessions() as session:
        images = images_in_use(session, ctx.host)
        known = images_known(session, ctx.host)
    options = ctx.settings.image_cache
    report = ctx.hypervisor.manage_image_cache(
        images,
        remove_unused=options.remove_unused_base_images,
        min_age_s=options.remove_unused_original_minimum_age_seconds,
        known_images=known,
    )
    if report.removed:
        LOG.info("Image cache on %s: removed unused base images %s", ctx.host, report.removed)
    return report.to_dict()


def images_in_use(session: Session, host: str) -> set[str]:
    """The images of the instances whose files live in this host's instances path."""
    refs = session.scalars(
        select(Instance.image_ref).where(Instance.host == host, Instance.deleted == 0).distinct()
    )
    return {ref for ref in refs if ref}


def images_known(session: Session, host: str) -> set[str]:
    """Every image an instance of this host, deleted ones included, booted from: the base
    files are named by the SHA-1 of the image id, so this names them in the report."""
    refs = session.scalars(select(Instance.image_ref).where(Instance.host == host).distinct())
    return {ref for ref in refs if ref}
