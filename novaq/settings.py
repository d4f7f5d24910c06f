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
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from novaq.exceptions import ConfigError

LOG = logging.getLogger(__name__)

_HEX4 = r"^[0-9a-fA-F]{4}$"


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PciDeviceSpecEntry(_Group):
    """One ``[[pci.device_spec]]`` matcher (Nova's ``[pci] device_spec``)."""

    vendor_id: str | None = Field(default=None, pattern=_HEX4)
    product_id: str | None = Field(default=None, pattern=_HEX4)
    address: str | None = None


class PciAliasEntry(_Group):
    """One ``[[pci.alias]]`` entry (Nova's ``[pci] alias``)."""

    name: str = Field(min_length=1)
    vendor_id: str = Field(pattern=_HEX4)
    product_id: str = Field(pattern=_HEX4)
    device_type: str = Field(default="type-PCI", pattern=r"^(type-PCI|type-PF|type-VF)$")
    numa_policy: str = Field(default="legacy", pattern=r"^(required|legacy|preferred|socket)$")


class PciGroup(_Group):
    alias: tuple[PciAliasEntry, ...] = ()
    device_spec: tuple[PciDeviceSpecEntry, ...] = ()


class SimulatedPciDevice(_Group):
    address: str = Field(pattern=r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
    vendor_id: str = Field(pattern=_HEX4)
    product_id: str = Field(pattern=_HEX4)
    numa_node: int | None = None


class SimulatedHost(_Group):
    """One ``[[hosts]]`` table: a simulated hypervisor host for the ``test:///`` driver, or
    a real one when it names a ``connection_uri``."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    vcpus: int = Field(default=16, gt=0)
    memory_mb: int = Field(default=32768, gt=0)
    local_gb: int = Field(default=500, gt=0)
    pci_devices: tuple[SimulatedPciDevice, ...] = ()
    fail_spawn: bool = False
    spawn_failure_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    spawn_delay_s: float = Field(default=0.0, ge=0.0, le=600.0)
    # A host with a connection URI (e.g. ``qemu:///system``) is a real libvirt host: its
    # worker drives that hypervisor, and the sizes and failure knobs above do not apply.
    connection_uri: str | None = Field(default=None, min_length=1)


class LibvirtGroup(_Group):
    """``[libvirt]``. An empty ``connection_uri`` means: the simulated host of this name."""

    connection_uri: str = ""
    instances_path: str | None = None
    # -- the guest (Nova's names and defaults); see ``virt.libvirt.options`` --------------
    #: The domain type. Nova's choices are kvm, lxc, qemu and parallels; novaq runs kvm and
    #: qemu (TCG). A ``test:///`` URI ignores it: the test driver offers only ``test``.
    virt_type: Literal["kvm", "qemu"] = "kvm"
    #: None: host-model under kvm, none under qemu; ``custom`` takes ``cpu_models``.
    cpu_mode: Literal["host-model", "host-passthrough", "custom", "none"] | None = None
    cpu_models: tuple[str, ...] = ()
    #: How long a soft reboot waits for the guest to shut down before rebooting hard.
    wait_soft_reboot_seconds: int = Field(default=120, ge=1)
    #: The memory balloon's statistics period (0: no statistics).
    mem_stats_period_seconds: int = Field(default=10, ge=0)

    @model_validator(mode="after")
    def _cpu_models_need_custom(self) -> LibvirtGroup:
        if self.cpu_mode == "custom" and not self.cpu_models:
            raise ValueError("cpu_mode custom needs at least one of cpu_models")
        if self.cpu_models and self.cpu_mode != "custom":
            raise ValueError("cpu_models is only valid with cpu_mode custom")
        return self


class SchedulerGroup(_Group):
    max_attempts: int = Field(default=3, ge=1)
    max_placement_results: int = Field(default=1000, ge=1)
    discover_hosts_in_cells_interval: int = Field(default=-1, ge=-1)


DEFAULT_FILTERS = (
    # Nova 34's defaults ...
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    # ... plus what Nova 34 does in placement and its pre-filters, which novaq has not.
    "AvailabilityZoneFilter",
    "CoreFilter",
    "RamFilter",
    "DiskFilter",
    "PciPassthroughFilter",
)
ALL_WEIGHERS = (
    "RAMWeigher",
    "CPUWeigher",
    "DiskWeigher",
    "IoOpsWeigher",
    "BuildFailureWeigher",
    "PCIWeigher",
    "ServerGroupSoftAffinityWeigher",
    "ServerGroupSoftAntiAffinityWeigher",
)


class FilterSchedulerGroup(_Group):
    """``[filter_scheduler]``: Nova's names and defaults."""

    enabled_filters: tuple[str, ...] = DEFAULT_FILTERS
    weight_classes: tuple[str, ...] = ALL_WEIGHERS
    host_subset_size: int = Field(default=1, ge=1)
    shuffle_best_same_weighed_hosts: bool = False
    max_io_ops_per_host: int = Field(default=8, ge=0)
    max_instances_per_host: int = Field(default=50, ge=1)
    track_instance_changes: bool = True
    isolated_hosts: tuple[str, ...] = ()
    isolated_images: tuple[str, ...] = ()
    restrict_isolated_hosts_to_isolated_images: bool = True
    image_properties_default_architecture: str | None = None
    ram_weight_multiplier: float = 1.0
    cpu_weight_multiplier: float = 1.0
    disk_weight_multiplier: float = 1.0
    io_ops_weight_multiplier: float = -1.0
    build_failure_weight_multiplier: float = 1000000.0
    pci_weight_multiplier: float = Field(default=1.0, ge=0.0)
    soft_affinity_weight_multiplier: float = Field(default=1.0, ge=0.0)
    soft_anti_affinity_weight_multiplier: float = Field(default=1.0, ge=0.0)


class ComputeGroup(_Group):
    """``[compute]``."""

    consecutive_build_service_disable_threshold: int = Field(default=10, ge=0)
    #: Seconds between ACPI shutdown requests while a clean shutdown is waited for.
    shutdown_retry_interval: int = Field(default=10, ge=1)


class ImageCacheGroup(_Group):
    """``[image_cache]``: the local cache of base images under ``instances_path``."""

    manager_interval: int = Field(default=2400, ge=-1)
    subdirectory_name: str = Field(default="_base", pattern=r"^[A-Za-z0-9_.-]+$")
    remove_unused_base_images: bool = True
    remove_unused_original_minimum_age_seconds: int = Field(default=86400, ge=0)


class ConsoleAuthGroup(_Group):
    """``[consoleauth]``."""

    token_ttl: int = Field(default=600, gt=0)


class PeriodicGroup(_Group):
    """``[periodic]``: what Nova hard-codes. ``default_spacing`` is the 60 s that an
    undecorated periodic task (or a spacing of 0) runs at; tests and operators shrink it."""

    default_spacing: int = Field(default=60, gt=0)


class GlanceGroup(_Group):
    """``[glance]``: where novaq's image registry keeps image data. ``store_path`` is a
    directory (default: ``<state_dir>/images``); each image's data is ``<store_path>/<id>``."""

    store_path: Path | None = None


class WorkaroundsGroup(_Group):
    """``[workarounds]``."""

    #: Turn the hypervisor's lifecycle events into power-state syncs (Nova's default);
    #: off, only the periodic ``_sync_power_states`` does.
    handle_virt_lifecycle_events: bool = True


class FlowerGroup(_Group):
    address: str = "127.0.0.1"
    port: int = Field(default=5555, ge=0, le=65535)
    basic_auth: SecretStr | None = None


class NotificationsGroup(_Group):
    """``[notifications]``. novaq emits only versioned notifications, so its default is
    ``versioned`` (Nova's ``unversioned`` would silence them); ``unversioned`` turns them off."""

    notification_format: str = Field(default="versioned", pattern=r"^(both|versioned|unversioned)$")

    @property
    def versioned(self) -> bool:
        return self.notification_format in ("both", "versioned")


class CeleryGroup(_Group):
    """Worker tuning that Nova has no name for (see shared/reference/CELERY_RELIABILITY.md)."""

    visibility_timeout: int = Field(default=3600, gt=0)
    compute_concurrency: int = Field(default=4, gt=0)
    scheduler_concurrency: int = Field(default=2, gt=0)
    max_delivery_attempts: int = Field(default=5, gt=0)
    unacked_restore_interval: int = Field(default=60, gt=0)


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
