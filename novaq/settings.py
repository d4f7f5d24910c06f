"""novaq's settings: one typed object with Nova's option names, groups and defaults.

Sources, highest priority first: keyword arguments (tests), ``NOVAQ_<OPTION>`` and
``NOVAQ_<GROUP>__<OPTION>`` environment variables, the TOML file named by ``NOVAQ_CONFIG``,
then the defaults below (Nova 34's, see ``shared/reference/NOVA_BEHAVIOUR.md``).

This is the only module that reads the environment or the TOML file. Everything else gets
a ``Settings`` passed in; the process entry points (``tasks/``, ``celeryconfig.py``, the
``novaq`` command) call :func:`load_settings` once.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from celery.app.backends import BACKEND_ALIASES
from kombu.transport import resolve_transport
from pydantic import (
    Field,
    IPvAnyAddress,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from sqlalchemy.engine import make_url

from novaq.exceptions import ConfigError, ServiceUnavailable
from novaq.settings_groups import (
    ALL_WEIGHERS,
    DEFAULT_FILTERS,
    CeleryGroup,
    ComputeGroup,
    ConsoleAuthGroup,
    DatabaseGroup,
    FilterSchedulerGroup,
    FlowerGroup,
    GlanceGroup,
    ImageCacheGroup,
    LibvirtGroup,
    MetricsGroup,
    NotificationsGroup,
    PciAliasEntry,
    PciDeviceSpecEntry,
    PciGroup,
    PeriodicGroup,
    SchedulerGroup,
    SimulatedHost,
    SimulatedPciDevice,
    TransferGroup,
    WorkaroundsGroup,
    split_list_option,
)

LOG = logging.getLogger(__name__)


class Settings(BaseSettings):
    """Every option novaq reads. Top-level fields are Nova's ``[DEFAULT]`` group."""

    model_config = SettingsConfigDict(
        env_prefix="NOVAQ_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    # -- novaq's own plumbing ------------------------------------------------------------
    state_dir: Path = Path(".novaq")
    database_url: str | None = None
    broker_url: str | None = None
    result_backend: str | None = None
    libvirt_uri: str | None = None
    hosts: tuple[SimulatedHost, ...] = ()
    # The reaper of operations in flight (compute/in_flight.py): how often it looks, after
    # how long without progress a queued message counts as lost and is sent again, and how
    # many sends before the operation is undone with a fault.
    operation_reap_interval: int = Field(default=10, gt=0)
    operation_lost_after: int = Field(default=60, gt=0)
    operation_max_resends: int = Field(default=3, ge=0)

    # -- [DEFAULT] (Nova names and defaults) ---------------------------------------------
    host: str = Field(default_factory=socket.gethostname, min_length=1)
    #: The address this host reports as its compute node's ``host_ip``. None: as Nova's
    #: default, the host's primary IPv4 address; a simulated ``[[hosts]]`` host gets its
    #: own (``compute.host_ip``).
    my_ip: IPvAnyAddress | None = None
    report_interval: int = Field(default=10, gt=0)
    service_down_time: int = Field(default=60, gt=0)
    enable_new_services: bool = True
    cpu_allocation_ratio: float | None = Field(default=None, gt=0)
    ram_allocation_ratio: float | None = Field(default=None, gt=0)
    disk_allocation_ratio: float | None = Field(default=None, gt=0)
    initial_cpu_allocation_ratio: float = Field(default=4.0, gt=0)
    initial_ram_allocation_ratio: float = Field(default=1.0, gt=0)
    initial_disk_allocation_ratio: float = Field(default=1.0, gt=0)
    reserved_host_memory_mb: int = Field(default=512, ge=0)
    reserved_host_disk_mb: int = Field(default=0, ge=0)
    reserved_host_cpus: int = Field(default=0, ge=0)
    max_concurrent_builds: int = Field(default=10, ge=0)
    instance_build_timeout: int = Field(default=0, ge=0)
    reclaim_instance_interval: int = 0
    shelved_offload_time: int = Field(default=0, ge=-1)
    default_availability_zone: str = Field(default="nova", min_length=1)
    allow_resize_to_same_host: bool = False
    default_schedule_zone: str | None = None
    update_resources_interval: int = 0
    # Periodic tasks (NOVA_BEHAVIOUR.md §7.2): spacings (0 = [periodic] default_spacing,
    # negative = off) and the thresholds the 60 s tasks compare against (0 = off).
    periodic_enable: bool = True
    sync_power_state_interval: int = 600
    sync_power_state_pool_size: int = Field(default=5, ge=1)
    heal_instance_info_cache_interval: int = -1
    scheduler_instance_sync_interval: int = 120
    reboot_timeout: int = Field(default=0, ge=0)
    rescue_timeout: int = Field(default=0, ge=0)
    resize_confirm_window: int = Field(default=0, ge=0)
    shelved_poll_interval: int = 3600
    instance_usage_audit: bool = False
    instance_usage_audit_period: str = Field(
        default="month", pattern=r"^(hour|day|month|year)(@[0-9]+)?$"
    )
    volume_usage_poll_interval: int = 0
    running_deleted_instance_action: Literal["reap", "log", "shutdown", "noop"] = "reap"
    running_deleted_instance_poll_interval: int = 1800
    running_deleted_instance_timeout: int = Field(default=0, ge=0)
    instance_delete_interval: int = 300
    maximum_instance_delete_attempts: int = Field(default=5, ge=1)
    resume_guests_state_on_host_boot: bool = False
    #: Seconds a clean shutdown (stop, shelve, resize, rescue) waits for the guest before
    #: destroying it; the image property ``os_shutdown_timeout`` overrides it.
    shutdown_timeout: int = Field(default=60, ge=0)
    # Nova's image backend (virt.libvirt.imagebackend): qcow2 overlays of the base
    # files, and images converted to raw when they enter the base cache.
    use_cow_images: bool = True
    force_raw_images: bool = True
    #: Resource monitors the periodic resource audit runs (Nova's ``compute_monitors``;
    #: none by default). novaq has Nova's one monitor, ``cpu.virt_driver`` (also spelt
    #: ``virt_driver`` or ``nova.compute.monitors.cpu.virt_driver``).
    compute_monitors: Annotated[tuple[str, ...], NoDecode] = ()

    libvirt: LibvirtGroup = LibvirtGroup()
    scheduler: SchedulerGroup = SchedulerGroup()
    filter_scheduler: FilterSchedulerGroup = FilterSchedulerGroup()
    compute: ComputeGroup = ComputeGroup()
    pci: PciGroup = PciGroup()
    flower: FlowerGroup = FlowerGroup()
    notifications: NotificationsGroup = NotificationsGroup()
    celery: CeleryGroup = CeleryGroup()
    database: DatabaseGroup = DatabaseGroup()
    image_cache: ImageCacheGroup = ImageCacheGroup()
    consoleauth: ConsoleAuthGroup = ConsoleAuthGroup()
    periodic: PeriodicGroup = PeriodicGroup()
    glance: GlanceGroup = GlanceGroup()
    transfer: TransferGroup = TransferGroup()
    workarounds: WorkaroundsGroup = WorkaroundsGroup()
    metrics: MetricsGroup = MetricsGroup()

    @field_validator("compute_monitors", mode="before")
    @classmethod
    def _monitors_from_a_string(cls, value: object) -> object:
        return split_list_option(value)

    @field_validator("compute_monitors")
    @classmethod
    def _known_monitors(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return canonical_monitors(value)

    @field_validator("database_url", "broker_url", "result_backend", "libvirt_uri")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value or None

    # NOTE: checked here, at start, so that a broken URL is one ConfigError naming its
    # option rather than a traceback from SQLAlchemy or kombu at the first connection.
    @field_validator("database_url")
    @classmethod
    def _a_database_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_database_url(value)
        return value

    @field_validator("broker_url")
    @classmethod
    def _a_broker_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_broker_url(value)
        return value

    @field_validator("result_backend")
    @classmethod
    def _a_result_backend(cls, value: str | None) -> str | None:
        if value is not None:
            check_result_backend(value)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("NOVAQ_CONFIG")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)

    # -- derived values ----------------------------------------------------------------
    @property
    def effective_service_down_time(self) -> int:
        """Nova raises a too-small ``service_down_time`` to 2.5 report intervals."""
        if self.service_down_time <= self.report_interval:
            return int(self.report_interval * 2.5)
        return self.service_down_time

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'novaq.sqlite').resolve()}"

    @property
    def image_store_path(self) -> Path:
        """The image store's directory (``[glance] store_path``, else under state_dir)."""
        return self.glance.store_path or self.state_dir / "images"

    def simulated_host(self, name: str | None = None) -> SimulatedHost | None:
        wanted = name or self.host
        return next((h for h in self.hosts if h.name == wanted), None)


# -- compute monitors ------------------------------------------------------------------------
#: The monitors novaq has, by their full name (Nova's entry points).
KNOWN_MONITORS = ("cpu.virt_driver",)


def canonical_monitors(names: tuple[str, ...]) -> tuple[str, ...]:
    """``compute_monitors`` as full names (``cpu.virt_driver``): a name without a
    namespace is a CPU monitor, ``nova.compute.monitors.`` is dropped (Nova's spellings).
    Raises ``ValueError`` for a monitor novaq has not.

    NOTE: Nova excludes an unknown monitor with a warning; novaq refuses it at start."""
    result: list[str] = []
    for name in names:
        full = name.strip().removeprefix("nova.compute.monitors.")
        if "." not in full:
            full = "cpu." + full
        if full not in KNOWN_MONITORS:
            raise ValueError(f"unknown monitor {name!r}; known: {', '.join(KNOWN_MONITORS)}")
        if full not in result:
            result.append(full)
    return tuple(result)


# -- URLs ------------------------------------------------------------------------------------
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: safe to print."""
    return _PASSWORD.sub(r"\1***@", url)


def _check_netloc(url: str, example: str) -> None:
    """The host and port parse (a port that is not a number is refused)."""
    try:
        urlsplit(url).port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"{redact_url(url)!r} is not a URL ({exc}); expected {example}") from None


def check_database_url(url: str) -> None:
    """Raise ``ValueError`` unless SQLAlchemy can parse ``url`` and knows its dialect."""
    example = "e.g. postgresql://user:password@host/dbname or sqlite:////path/to/file"
    try:
        make_url(url).get_dialect()
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several kinds for a bad URL
        reason = "unknown database dialect" if "plugin" in str(exc) else "not a database URL"
        raise ValueError(f"{redact_url(url)!r}: {reason}; expected {example}") from None


def check_broker_url(url: str) -> None:
    """Raise ``ValueError`` unless each of ``url``'s (``;``-separated, for failover) URLs
    names a kombu transport and parses."""
    example = "e.g. redis://:password@127.0.0.1:6379/0"
    for one in url.split(";"):
        scheme, sep, _ = one.strip().partition("://")
        transport = scheme.partition("+")[0]
        try:
            known = bool(sep) and bool(resolve_transport(transport))
        except KeyError:
            known = False
        if not known:
            raise ValueError(
                f"{redact_url(one)!r} is not a broker URL (no known transport "
                f"{transport!r}); expected {example}"
            )
        _check_netloc(one, example)


def check_result_backend(url: str) -> None:
    """Raise ``ValueError`` unless ``url`` names a Celery result backend and parses."""
    example = "e.g. redis://:password@127.0.0.1:6379/1"
    scheme, sep, _ = url.partition("://")
    backend = scheme.partition("+")[0]
    if not sep or backend not in BACKEND_ALIASES:
        raise ValueError(
            f"{redact_url(url)!r} is not a result backend URL (no known backend "
            f"{backend!r}); expected {example}"
        )
    _check_netloc(url, example)


def _option_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if not parts:
        return "settings"
    group = parts[0] if len(parts) > 1 else "DEFAULT"
    option = parts[-1] if len(parts) > 1 else parts[0]
    env = "NOVAQ_" + "__".join(p.upper() for p in parts[:2])
    return f"[{group}] {option} ({env})"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings, turning a validation failure into one ``ConfigError`` that names
    each wrong option, its group and its environment variable."""
    config_file = os.environ.get("NOVAQ_CONFIG")
    if config_file and not Path(config_file).is_file():
        raise ConfigError(option="NOVAQ_CONFIG", reason=f"no such file: {config_file}")
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"{_option_name(err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"Invalid settings: {problems}") from None
    except ValueError as exc:  # a malformed TOML file
        raise ConfigError(option="NOVAQ_CONFIG", reason=str(exc)) from None
    if settings.service_down_time <= settings.report_interval:
        LOG.warning(
            "service_down_time (%s) <= report_interval (%s); using %s",
            settings.service_down_time,
            settings.report_interval,
            settings.effective_service_down_time,
        )
    return settings


# -- a local cluster ---------------------------------------------------------------------------
#: What ``novaq up`` leaves under its state directory for the other processes of this
#: directory (the ``novaq`` commands, ``from workflows import api``): its embedded broker's
#: URL (0600, removed when the cluster stops) and the cluster's config.
BROKER_URL_FILE = Path("broker") / "url"
CLUSTER_CONFIG_FILE = "cluster.toml"


def find_local_cluster() -> dict[str, str]:
    """Point this process at the ``novaq up`` cluster running from its state directory:
    its embedded broker (``NOVAQ_BROKER_URL``) and its config (``NOVAQ_CONFIG``), each
    unless the environment already names one. Returns the variables it set.

    NOTE: the one discovery of the command and the Python API alike (``get_settings``
    calls it). It sets the process's environment rather than only this module's settings
    so that everything reading settings afterwards (``celeryconfig``, a process this one
    starts) agrees on one cluster.
    """
    state_dir = load_settings().state_dir.resolve()
    found: dict[str, str] = {}
    url_file = state_dir / BROKER_URL_FILE
    if "NOVAQ_BROKER_URL" not in os.environ and url_file.is_file():
        found["NOVAQ_BROKER_URL"] = url_file.read_text(encoding="utf-8").strip()
    config = state_dir / CLUSTER_CONFIG_FILE
    if "NOVAQ_CONFIG" not in os.environ and config.is_file():
        found["NOVAQ_CONFIG"] = str(config)
    if found:
        os.environ.update(found)
        LOG.debug("using the local cluster of %s: %s", state_dir, sorted(found))
    return found


def required_broker_url(settings: Settings) -> str:
    """The broker to publish to and consume from; ``ServiceUnavailable`` when none is
    configured and no local cluster was found. Never a default nobody configured: a
    message sent to a broker no worker reads would leave its server waiting for ever."""
    if settings.broker_url:
        return settings.broker_url
    state_dir = settings.state_dir.resolve()
    raise ServiceUnavailable(
        service="message broker",
        reason="none is configured: NOVAQ_BROKER_URL is not set and no `novaq up` cluster "
        f"runs from the state directory {state_dir} (no {state_dir / BROKER_URL_FILE}); run "
        "`novaq up` in this directory (or set NOVAQ_STATE_DIR to its state directory), or "
        "set NOVAQ_BROKER_URL",
    )


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, for entry points only (tasks, celeryconfig, the CLI, the
    public API): those of the environment, pointed at the local ``novaq up`` cluster when
    the environment names no broker or config of its own (:func:`find_local_cluster`)."""
    find_local_cluster()
    return load_settings()


__all__ = [
    "ALL_WEIGHERS",
    "CeleryGroup",
    "ComputeGroup",
    "ConsoleAuthGroup",
    "DEFAULT_FILTERS",
    "FilterSchedulerGroup",
    "FlowerGroup",
    "GlanceGroup",
    "ImageCacheGroup",
    "LibvirtGroup",
    "NotificationsGroup",
    "PciAliasEntry",
    "PciDeviceSpecEntry",
    "PciGroup",
    "PeriodicGroup",
    "SchedulerGroup",
    "Settings",
    "SimulatedHost",
    "SimulatedPciDevice",
    "WorkaroundsGroup",
    "BROKER_URL_FILE",
    "CLUSTER_CONFIG_FILE",
    "check_broker_url",
    "check_database_url",
    "check_result_backend",
    "find_local_cluster",
    "get_settings",
    "load_settings",
    "redact_url",
    "required_broker_url",
]
