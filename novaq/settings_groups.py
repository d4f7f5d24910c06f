"""The option groups of novaq's settings (``[libvirt]``, ``[filter_scheduler]``,
``[pci]``, …), with Nova's names and defaults; ``novaq.settings.Settings`` holds one of
each."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    IPvAnyAddress,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import NoDecode

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
    #: None (left out) matches any device type but a PF, as Nova's alias does (its PCI
    #: stats leave PFs out of a request that does not ask for one).
    device_type: str | None = Field(default=None, pattern=r"^(type-PCI|type-PF|type-VF)$")
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
    #: The address this host reports (its compute node's ``host_ip``); None: the
    #: ``my_ip`` option if set, else a loopback address of its own (``compute.host_ip``).
    host_ip: IPvAnyAddress | None = None


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
    "MetricsWeigher",
    "CrossCellWeigher",
    "HypervisorVersionWeigher",
    "ImagePropertiesWeigher",
    "NumInstancesWeigher",
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
    cross_cell_move_weight_multiplier: float = 1000000.0
    hypervisor_version_weight_multiplier: float = 1.0
    num_instances_weight_multiplier: float = 0.0
    image_props_weight_multiplier: float = 0.0
    #: ``name=ratio`` pairs (Nova's ListOpt); an element that is not one is refused here
    #: (Nova ignores it with a warning).
    image_props_weight_setting: tuple[str, ...] = ()
    #: Deprecated in Nova 33 (its filter then checks only keys under the namespace that
    #: are also image property names), kept with Nova's defaults.
    aggregate_image_properties_isolation_namespace: str | None = None
    aggregate_image_properties_isolation_separator: str = "."

    @field_validator("image_props_weight_setting")
    @classmethod
    def _name_ratio_pairs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pair in value:
            try:
                name_ratio(pair)
            except ValueError:
                raise ValueError(f"{pair!r} is not name=ratio (e.g. os_distro=1.0)") from None
        return value


def split_list_option(value: object) -> object:
    """A list option given as one string (an environment variable, or Nova's spelling in
    a config file): a JSON list, or items separated by commas."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        return json.loads(value)
    return tuple(part.strip() for part in value.split(",") if part.strip())


#: A list option that a string gives too (``split_list_option``).
ListOption = Annotated[tuple[str, ...], NoDecode, BeforeValidator(split_list_option)]


def parse_weight_setting(items: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """``[metrics] weight_setting`` as (metric name, ratio) pairs, in order (a name given
    twice counts twice, as in Nova). Raises ``ValueError`` naming the first element that
    is not ``name=ratio`` with a non-empty name and a finite number.

    NOTE: Nova's ``parse_options`` drops a malformed element with a warning (and keeps a
    name's surrounding spaces, so ``cpu.percent =1`` names no metric); novaq refuses it
    at start, and strips the name."""
    pairs = []
    for item in items:
        try:
            name, ratio = name_ratio(item)
        except ValueError:
            name, ratio = "", math.nan
        if not (name and math.isfinite(ratio)):
            raise ValueError(
                f"{item!r} is not a metric=ratio pair (e.g. cpu.percent=-1.0) with a finite ratio"
            )
        pairs.append((name, ratio))
    return tuple(pairs)


def name_ratio(item: str) -> tuple[str, float]:
    """One ``name=ratio`` element of a weight setting (the name stripped); ``ValueError``
    when it has no ``=``, no name, or a ratio that is not a number."""
    name, sep, ratio = item.partition("=")
    name = name.strip()
    if not (name and sep):
        raise ValueError(f"{item!r} is not name=ratio")
    return name, float(ratio)


class MetricsGroup(_Group):
    """``[metrics]``: the MetricsWeigher and MetricsFilter (Nova's names and defaults).
    ``weight_setting`` is a list of ``name=ratio`` strings, or one string of them separated
    by commas (as Nova's option is written)."""

    weight_multiplier: float = Field(default=1.0, allow_inf_nan=False)
    weight_setting: Annotated[tuple[str, ...], NoDecode] = ()
    required: bool = True
    weight_of_unavailable: float = Field(default=-10000.0, allow_inf_nan=False)

    @field_validator("weight_setting", mode="before")
    @classmethod
    def _split_a_string(cls, value: object) -> object:
        return split_list_option(value)

    @field_validator("weight_setting")
    @classmethod
    def _name_ratio_pairs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_weight_setting(value)
        return tuple(item.strip() for item in value)

    @property
    def weights(self) -> tuple[tuple[str, float], ...]:
        """(metric name, ratio) pairs of ``weight_setting``."""
        return parse_weight_setting(self.weight_setting)


class ComputeGroup(_Group):
    """``[compute]``."""

    consecutive_build_service_disable_threshold: int = Field(default=10, ge=0)
    #: Seconds between ACPI shutdown requests while a clean shutdown is waited for.
    shutdown_retry_interval: int = Field(default=10, ge=1)


class DatabaseGroup(_Group):
    """``[database]``: how long a worker waits out a database that cannot be reached
    (``models.outage``). The URL stays ``database_url`` (``NOVAQ_DATABASE_URL``).

    A step (and, after it, its error callback) waits up to ``outage_tolerance_s`` for the
    database, trying again after ``db_retry_interval`` seconds, then twice as long each
    time up to ``db_max_retry_interval`` (Nova's ``[database]`` names and defaults for the
    intervals). A step holds its message unacknowledged while it waits, so
    ``[celery] visibility_timeout`` must exceed the longest step plus three times this
    (the step, then its undo, then its error callback may each wait).
    """

    outage_tolerance_s: float = Field(default=90.0, ge=0.0, le=3600.0)
    db_retry_interval: float = Field(default=1.0, gt=0.0, le=60.0)
    db_max_retry_interval: float = Field(default=10.0, gt=0.0, le=300.0)

    @field_validator("db_max_retry_interval")
    @classmethod
    def _not_below_first_interval(cls, value: float, info: ValidationInfo) -> float:
        first = info.data.get("db_retry_interval")
        if first is not None and value < first:
            raise ValueError(f"must not be below db_retry_interval ({first})")
        return value


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
    directory (default: ``<state_dir>/images``); each image's data is ``<store_path>/<id>``.

    ``api_servers`` (Nova's option): the image endpoints a compute host fetches image data
    from (``<server>/images/<id>``, signed with ``[transfer] secret``), tried in order;
    empty (the default), a host reads the store's file itself (one machine).
    ``num_retries`` (Nova's option and default): when no endpoint could be reached (no
    answer, a dropped connection, a 5xx), how many more rounds over them a fetch makes,
    a second apart, before the build fails."""

    store_path: Path | None = None
    api_servers: ListOption = ()
    num_retries: int = Field(default=3, ge=0)

    @field_validator("api_servers")
    @classmethod
    def _http_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"api_servers: {url!r} is not an http(s) URL")
        return tuple(url.rstrip("/") for url in value)


class TransferGroup(_Group):
    """``[transfer]``: the signed-URL file service images and migrating disks travel by
    (``virt.transfer``). ``secret`` is shared by every machine of the cloud; without it no
    host publishes a disk endpoint and every move copies locally (one machine only).
    ``disk_port`` is the port a compute host's disk endpoint listens on (0: any free one,
    published in its services row); ``url_ttl`` how long a signed URL stays valid (s)."""

    secret: SecretStr | None = None
    disk_port: int = Field(default=0, ge=0, le=65535)
    url_ttl: int = Field(default=300, gt=0)

    @field_validator("secret")
    @classmethod
    def _blank_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value() else None


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
