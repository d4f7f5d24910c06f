"""The roles of a cluster of many machines: ``novaq controller`` (the scheduler worker,
a standby celery beat, Flower and the image endpoint) and ``novaq compute --host NAME``
(one compute worker), each a supervised :class:`~novaq.launcher.group.ProcessGroup` run
from settings alone.

What a role refuses, and why:

- **no broker or database of its own making.** ``NOVAQ_BROKER_URL`` and
  ``NOVAQ_DATABASE_URL`` (or ``broker_url`` / ``database_url`` in the ``NOVAQ_CONFIG``
  file) must name the shared ones; a missing one is a ``ConfigError`` naming it, and
  nothing starts. No embedded broker, no SQLite default: a machine with either would be a
  cluster of its own, silently.
- **no discovery.** ``novaq up`` leaves ``<state_dir>/broker/url`` and
  ``<state_dir>/cluster.toml`` for the other processes of its directory, which
  ``novaq.settings.find_local_cluster`` (called by every ``get_settings``) reads when the
  environment names no broker or config. A role reads its settings with ``load_settings``
  (no discovery), and gives every child ``NOVAQ_BROKER_URL`` and ``NOVAQ_CONFIG`` (the
  operator's file, or "" for none): with both present in its environment, a child's
  ``find_local_cluster`` reads nothing.
- **no migration.** As Nova's services leave ``nova-manage db sync`` to the operator, a
  role does not upgrade the schema: two controllers starting together would race Alembic,
  and an upgrade is a decision taken once per release from one machine (``novaq db
  upgrade``). A role checks that the database is at the newest revision its code knows,
  and refuses to start otherwise, naming the command (it waits for a database that does
  not answer yet, as workers and beat do).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from novaq.exceptions import ConfigError
from novaq.launcher.group import ProcessGroup
from novaq.launcher.specs import (
    ProcessSpec,
    beat_lease_holder,
    beat_spec,
    compute_spec,
    flower_spec,
    image_endpoint_spec,
    scheduler_spec,
    shared_env,
)
from novaq.settings import Settings, redact_url

LOG = logging.getLogger(__name__)

#: A compute host's name: a host name (it makes a queue and a Celery node name).
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: What a role needs from its settings, by option and environment variable.
_REQUIRED = (
    ("broker_url", "NOVAQ_BROKER_URL"),
    ("database_url", "NOVAQ_DATABASE_URL"),
)


def require_shared_services(settings: Settings, role: str) -> tuple[str, str]:
    """The broker and database URLs of ``settings``; a ``ConfigError`` naming every one
    that is missing otherwise."""
    missing = [env for option, env in _REQUIRED if not getattr(settings, option)]
    if missing:
        raise ConfigError(
            f"novaq {role} runs from settings alone and needs {' and '.join(missing)} "
            f"(or {' and '.join(o for o, e in _REQUIRED if e in missing)} in the NOVAQ_CONFIG "
            "file): the broker and the database every machine of the cluster shares. "
            "Nothing was started."
        )
    assert settings.broker_url is not None and settings.database_url is not None
    return settings.broker_url, settings.database_url


def role_env(settings: Settings, env: Mapping[str, str], role: str) -> dict[str, str]:
    """The environment every child of a role shares: the configured broker, database and
    state directory, and ``NOVAQ_CONFIG`` always set (to "" when the operator names no
    file), so that no child discovers a ``novaq up`` cluster's files (module docstring)."""
    broker_url, database_url = require_shared_services(settings, role)
    config = env.get("NOVAQ_CONFIG", "")
    return shared_env(
        env,
        broker_url=broker_url,
        database_url=database_url,
        state_dir=settings.state_dir,
        config=str(Path(config).resolve()) if config else "",
    )


@dataclass(frozen=True, slots=True)
class ImageEndpoint:
    """Whether the controller serves images (``novaq image-endpoint``), and where; None
    for the command's own default."""

    address: str | None = None
    port: int | None = None


def controller_plan(
    settings: Settings,
    env: Mapping[str, str],
    *,
    image_endpoint: ImageEndpoint | None = ImageEndpoint(),
) -> list[ProcessSpec]:
    """The controller's processes: the scheduler worker as ``scheduler@<[DEFAULT] host>``,
    a standby beat (it takes over when another controller's beat dies), Flower, and the
    image endpoint unless ``image_endpoint`` is None."""
    common = role_env(settings, env, "controller")
    specs = [
        scheduler_spec(settings, common, host=settings.host),
        beat_spec(settings, common, beat_lease_holder("novaq-controller"), standby=True),
        flower_spec(settings, common),
    ]
    if image_endpoint is not None:
        specs.append(
            image_endpoint_spec(common, address=image_endpoint.address, port=image_endpoint.port)
        )
    return specs


def compute_plan(settings: Settings, env: Mapping[str, str], host: str) -> list[ProcessSpec]:
    """The compute host's one process: the compute worker of ``host``."""
    check_host_name(host)
    return [compute_spec(settings, role_env(settings, env, "compute"), host)]


def check_host_name(host: str) -> None:
    """Refuse a compute host's name that is not a host name.

    NOTE: a ',' would make the worker consume two queues (``-Q compute.a,b``), an '@'
    another node name; Nova's hosts are host names.
    """
    if not _HOST_NAME.fullmatch(host):
        raise ConfigError(
            option="--host",
            reason=f"{host!r} is not a host name (letters, digits, '.', '-', '_', starting "
            "with a letter or digit)",
        )


def check_schema(database_url: str) -> None:
    """Refuse a database that is not at the newest revision this code knows. A database
    that does not answer yet is waited for, as workers and beat wait for it (saying so
    once, retrying with backoff; SIGTERM or Ctrl-C ends the wait)."""
    from alembic.script import ScriptDirectory  # imported late: only a role needs them

    from models.migrate import alembic_config, current
    from tasks.waiting import until_database_answers

    head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
    revision = until_database_answers(
        f"checking the schema of {redact_url(database_url)}",
        lambda: current(database_url),
        logger=LOG,
    )
    if revision != head:
        raise ConfigError(
            f"the database {redact_url(database_url)} is at revision {revision or 'none'}, "
            f"not {head}: run `novaq db upgrade` (once, from one machine) first; "
            "a role never migrates the schema itself"
        )


class Role(ProcessGroup):
    """A role's supervised processes: the broker is the configured one, and the start
    checks the schema (and nothing else: no broker, no TOML, no migration)."""

    #: The command's name (``novaq <role>``).
    role = "role"

    def __init__(self, settings: Settings, **options: Any) -> None:
        require_shared_services(settings, self.role)  # before anything else
        super().__init__(settings, **options)
        self.launcher = f"novaq {self.role}"

    @property
    def broker_url(self) -> str:
        broker_url, _ = require_shared_services(self.settings, self.role)
        return broker_url

    def prepare(self) -> None:
        _, database_url = require_shared_services(self.settings, self.role)
        check_schema(database_url)


class Controller(Role):
    """``novaq controller``: see :func:`controller_plan`."""

    role = label = "controller"

    def __init__(
        self, settings: Settings, *, image_endpoint: ImageEndpoint | None, **options: Any
    ) -> None:
        super().__init__(settings, **options)
        self.image_endpoint = image_endpoint

    def plan(self, broker_url: str) -> list[ProcessSpec]:
        # NOTE: planned at start, after Flower's port was moved if it was taken.
        return controller_plan(self.settings, self._env, image_endpoint=self.image_endpoint)


class ComputeHost(Role):
    """``novaq compute --host NAME``: see :func:`compute_plan`."""

    role = "compute"
    runs_flower = False

    def __init__(self, settings: Settings, host: str, **options: Any) -> None:
        check_host_name(host)  # before anything starts
        self.host = host
        self.label = f"compute {host}"
        super().__init__(settings, **options)

    def plan(self, broker_url: str) -> list[ProcessSpec]:
        return compute_plan(self.settings, self._env, self.host)
