"""Where a compute host reads an image's data from: the image endpoints of ``[glance]
api_servers`` (``<server>/images/<id>``, signed), tried in order, or, with none, the
store's own file (``ImageSpec.location``: one machine, where the store is this host's)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from novaq.exceptions import ConfigError
from virt.driver import ImageSpec
from virt.transfer.names import image_path
from virt.transfer.signing import TransferKey, signed_url


@dataclass(frozen=True, slots=True)
class ImageServers:
    """``[glance] api_servers``, the ``[transfer]`` key that signs requests to them, and
    how many more rounds over them a fetch makes when none answered (``[glance]
    num_retries``)."""

    servers: tuple[str, ...] = ()
    key: TransferKey | None = None
    num_retries: int = 0

    def __post_init__(self) -> None:
        if self.servers and self.key is None:
            raise ConfigError(
                option="[glance] api_servers",
                reason="image endpoints need [transfer] secret (NOVAQ_TRANSFER__SECRET) "
                "to sign requests",
            )

    def candidates(self, image: ImageSpec) -> list[ImageSpec]:
        """``image`` located at each endpoint in turn (a URL signed now), or as recorded."""
        if not self.servers or self.key is None:
            return [image]
        path = image_path(image.id)
        return [
            dataclasses.replace(image, location=signed_url(self.key, server, path))
            for server in self.servers
        ]
