"""What a compute host needs of the signed-URL file service (``virt.transfer``), from
settings: the key (``[transfer] secret``), the image endpoints it fetches from (``[glance]
api_servers``), and its own disk endpoint, which serves the moved-aside disks of a move in
progress (``<instances_path>/<uuid>_resize/{disk, disk.eph0, disk.info}``) to the
destination that pulls them, bound at this host's address (``compute.host_ip``) on
``[transfer] disk_port`` (0: any free port; the URL is published in the host's services
row by its registration). Without a secret no endpoint runs: moves copy locally.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from compute.host_ip import host_ip, ip_text
from novaq.exceptions import ConfigError
from novaq.settings import Settings
from virt.libvirt.instance_files import RESIZE_SUFFIX
from virt.libvirt.migration import COPIED
from virt.transfer.file_server import SignedFileServer, bind
from virt.transfer.image_source import ImageServers
from virt.transfer.names import disk_resolver, image_resolver
from virt.transfer.signing import TransferKey

LOG = logging.getLogger(__name__)


def transfer_key(settings: Settings) -> TransferKey | None:
    """The key of ``[transfer] secret`` (None: no secret configured)."""
    secret = settings.transfer.secret
    if secret is None:
        return None
    return TransferKey.from_text(secret.get_secret_value(), settings.transfer.url_ttl)


def image_servers(settings: Settings) -> ImageServers:
    """``[glance] api_servers`` with the key that signs requests to them."""
    glance = settings.glance
    return ImageServers(glance.api_servers, transfer_key(settings), glance.num_retries)


def bind_image_endpoint(settings: Settings, address: str, port: int) -> SignedFileServer:
    """The controller's image endpoint (``novaq image-endpoint``), bound, not yet serving:
    ``GET /images/<id>`` from the image store, to requests signed with the secret.
    OSError when it cannot listen; ConfigError without a secret."""
    key = transfer_key(settings)
    if key is None:
        raise ConfigError(
            option="[transfer] secret",
            reason="the image endpoint serves signed requests only: set "
            "NOVAQ_TRANSFER__SECRET (the same on every machine)",
        )
    return bind(address, port, key, image_resolver(settings.image_store_path.resolve()))


def start_disk_endpoint(settings: Settings, instances_path: Path) -> SignedFileServer | None:
    """This host's disk endpoint, serving in a thread of its own; None without a secret."""
    key = transfer_key(settings)
    if key is None:
        warn_local_copies(settings.host)
        return None
    resolve = disk_resolver(instances_path, COPIED, RESIZE_SUFFIX)
    address = ip_text(host_ip(settings)) or "127.0.0.1"
    try:
        server = bind(address, settings.transfer.disk_port, key, resolve)
    except OSError as exc:
        raise ConfigError(
            option="[transfer] disk_port",
            reason=f"the disk endpoint cannot listen on {address}:"
            f"{settings.transfer.disk_port} (my_ip must be this host's): {exc}",
        ) from exc
    server.serve_in_thread(name=f"disk-endpoint-{settings.host}")
    LOG.info("Disk endpoint of %s serving at %s", settings.host, server.url)
    return server


@functools.cache
def warn_local_copies(host: str) -> None:
    """Said once per process: why this host's moves copy disks locally."""
    LOG.warning(
        "Compute host %s publishes no disk endpoint ([transfer] secret is not set): a "
        "resize or cold migration from it copies the disks into the destination's "
        "instances_path, which works on one machine (or a shared file system) only",
        host,
    )
