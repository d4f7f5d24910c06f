"""The local cluster behind ``novaq up`` and ``novaq demo``: every process on one machine.

It runs the plan of ``novaq/launcher/plan.py`` (the processes and the cluster's TOML file)
as a supervised :class:`~novaq.launcher.group.ProcessGroup`, and owns what only the
one-machine shortcut has: the embedded broker when no ``NOVAQ_BROKER_URL`` is set (itself
supervised, restarted on the same URL), the cluster's TOML with its simulated hosts, the
database upgrade and the demo image. The roles of a cluster of many machines are
``novaq/launcher/roles.py``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from novaq.launcher.children import BrokerMember
from novaq.launcher.embedded_broker import EmbeddedRedis, free_loopback_port
from novaq.launcher.group import SHUTDOWN_TIMEOUT_S, ProcessGroup
from novaq.launcher.plan import plan_processes, write_cluster_config
from novaq.launcher.specs import ProcessSpec
from novaq.launcher.supervisor import Member
from novaq.settings import Settings

LOG = logging.getLogger(__name__)

__all__ = ["Cluster", "SHUTDOWN_TIMEOUT_S"]


def _upgrade_database(url: str) -> None:
    from models.migrate import upgrade  # imported late: models/ is optional for this module

    upgrade(url)


def _prepare_database(settings: Settings, url: str) -> None:
    """Upgrade the schema, then register the demo "cirros" image if there is none, so a
    fresh cluster boots servers at once (``novaq boot --image cirros``)."""
    from workflows.api.images import ensure_demo_image

    _upgrade_database(url)
    if ensure_demo_image(settings) is not None:
        LOG.info("registered the demo image cirros in %s", settings.image_store_path)


class Cluster(ProcessGroup):
    """A local cluster (see :class:`ProcessGroup` for its life and ``options``).
    ``n_hosts`` simulated hosts unless the settings declare some; ``migrate`` (default
    ``models.migrate.upgrade`` plus the demo image) is called with the database URL before
    anything starts."""

    def __init__(
        self,
        settings: Settings,
        *,
        n_hosts: int = 2,
        migrate: Callable[[str], None] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(settings, **options)
        self.n_hosts = n_hosts
        self._migrate = migrate or functools.partial(_prepare_database, settings)
        self._broker: EmbeddedRedis | None = None
        self._hosts: list[str] = []
        # The cluster's own image endpoint, unless the settings name one ([glance]).
        self._image_port: int | None = None

    @property
    def broker_url(self) -> str:
        if self.settings.broker_url:
            return self.settings.broker_url
        if self._broker is None:
            raise RuntimeError("the cluster is not started: it has no embedded broker yet")
        return self._broker.url

    @property
    def hosts(self) -> list[str]:
        return list(self._hosts)

    def plan(self, broker_url: str) -> list[ProcessSpec]:
        """The processes to run (tests override this to run a smaller app)."""
        return plan_processes(
            self.settings, self._hosts, broker_url, self._env, image_port=self._image_port
        )

    def prepare(self) -> None:
        """Start the embedded broker (unless one is configured), pick the image endpoint's
        port (unless ``[glance] api_servers`` names one), write the cluster's TOML, upgrade
        the database."""
        if not self.settings.broker_url:
            self._broker = EmbeddedRedis(self.state_dir).start()
        if not self.settings.glance.api_servers:
            self._image_port = free_loopback_port()
        _, self._hosts = write_cluster_config(
            self.settings, self.n_hosts, image_port=self._image_port
        )
        self._migrate(self.settings.sqlalchemy_url)

    def announce_prepared(self) -> None:
        if self._broker is not None:
            self._system(
                f"broker started (pid={self._broker.pid}, 127.0.0.1:{self._broker.port}; "
                f"its URL in {self._broker.url_path})"
            )

    def stop(self) -> None:
        """Stop the children (:meth:`ProcessGroup.stop`), then the embedded broker."""
        super().stop()
        if self._broker is not None:
            self._broker.stop()

    def _members(self) -> list[Member]:
        """What the supervisor watches: the embedded broker first, then the children."""
        members: list[Member] = [] if self._broker is None else [BrokerMember(self._broker)]
        return [*members, *super()._members()]
