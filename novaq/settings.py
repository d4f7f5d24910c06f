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
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from novaq.exceptions import ConfigError
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
    NotificationsGroup,
    PciAliasEntry,
    PciDeviceSpecEntry,
    PciGroup,
    PeriodicGroup,
    SchedulerGroup,
    SimulatedHost,
    SimulatedPciDevice,
    WorkaroundsGroup,
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
    workarounds: WorkaroundsGroup = WorkaroundsGroup()

    @field_validator("database_url", "broker_url", "result_backend", "libvirt_uri")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value or None

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


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, for entry points only (tasks, celeryconfig, the CLI)."""
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
    "get_settings",
    "load_settings",
]
