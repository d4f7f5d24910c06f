"""novaq's error tree: every error novaq raises on purpose is a ``NovaqError``.

::

    NovaqError
    ├── ConfigError                  broken settings (names the option)
    ├── ServiceUnavailable           broker or database down / unreachable
    │   └── DatabaseUnavailable      the database cannot be reached now (models.db
    │                                classifies; workers wait it out, models.outage)
    ├── ReadOnlyTransactionError     a write in a read-only transaction (a bug of its caller)
    ├── InvalidInput                 bad arguments from a user (API, CLI)
    │   ├── InvalidFlavor            zero or negative sizes, malformed extra specs
    │   ├── FlavorExists
    │   ├── ResizeError              a resize Nova refuses (shrinking a disk)
    │   └── InvalidToken             a console token that is unknown or has expired
    ├── NotFound
    │   ├── FlavorNotFound
    │   ├── InstanceNotFound
    │   ├── ComputeHostNotFound
    │   └── DomainNotFound           the hypervisor has no such guest
    ├── InstanceInvalidState         operation not allowed in the current state
    ├── UnexpectedTaskStateError     a compare-and-swap on task_state lost (redelivery, race)
    ├── InvalidMigrationTransition   a migration status change the transition table refuses
    ├── ClaimError
    │   ├── ResourcesUnavailable     the node has not enough free capacity
    │   └── GenerationConflict       another claim moved the node's generation first
    ├── NoValidHost                  the scheduler found no host
    │   └── ComputeHostMetricNotFound  [metrics] required and a host lacks a weighed metric
    ├── BuildError
    │   ├── RescheduleError          transient: try an alternate host
    │   └── BuildAbortError          final: ERROR the instance
    ├── HypervisorError              libvirt failed (translated in virt/libvirt/host.py)
    │   └── ImageUnacceptable        the image cannot be this guest's disk: abort, no reschedule
    ├── OperationFailed              api.wait saw the operation end without the status
    │   └── InstanceErrored          api.wait saw the instance go to ERROR
    └── WaitTimeout                  api.wait gave up

Images (the registry and boot's checks against it)::

    NotFound
    └── ImageNotFound                no image with that id or name (or purged)
    InvalidInput
    ├── InvalidImage                 bad image-create input; data not in its disk_format
    ├── ImageNotActive               boot from an image that is queued or deleted
    ├── FlavorMemoryTooSmall         flavor memory_mb < image min_ram
    └── FlavorDiskTooSmall
        ├── FlavorDiskSmallerThanImage     root_gb < the image's (virtual) size
        └── FlavorDiskSmallerThanMinDisk   root_gb < the image's min_disk
    ImageStoreError                  the store failed (no qemu-img, disk full, unreadable)

Rebuild and evacuate::

    InvalidInput
    └── ComputeServiceInUse          evacuate while the server's compute service is up

Messages come from class templates filled with keyword arguments, as Nova's do:
``NoValidHost(reason="...")``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class NovaqError(Exception):
    """Root of every error novaq raises on purpose."""

    msg_fmt: ClassVar[str] = "An unknown error occurred."
    code: ClassVar[int] = 500

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError):
                message = self.msg_fmt
        self.message = message
        super().__init__(message)


class ConfigError(NovaqError):
    msg_fmt = "Invalid setting %(option)s: %(reason)s"


class ServiceUnavailable(NovaqError):
    msg_fmt = "%(service)s is unavailable: %(reason)s"
    code = 503


class DatabaseUnavailable(ServiceUnavailable):
    """The database refused, dropped or timed out a connection, is starting up, shutting
    down or failing over, or (SQLite) stayed locked: an error of the database's
    availability, not of the request (``models.db.is_transient_error`` decides). Callers
    of the API see it at once; a worker's step waits it out (``models.outage``)."""

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("service", "database")
        super().__init__(message, **kwargs)


class ReadOnlyTransactionError(NovaqError):
    """A write in ``session_scope(read_only=True)``: the caller's bug, never transient
    (nothing was written)."""

    msg_fmt = "A read-only transaction may not write: %(reason)s"


class InvalidInput(NovaqError):
    msg_fmt = "Invalid input: %(reason)s"
    code = 400


class InvalidFlavor(InvalidInput):
    msg_fmt = "Invalid flavor: %(reason)s"


class ResizeError(InvalidInput):
    msg_fmt = "Resize error: %(reason)s"


class FlavorExists(InvalidInput):
    msg_fmt = "Flavor %(name)s already exists."
    code = 409


class InvalidToken(InvalidInput):
    """Nova's ``InvalidToken``; the message never repeats the token (it is a secret)."""

    msg_fmt = "The console token is invalid or has expired: %(reason)s"


class NotFound(NovaqError):
    msg_fmt = "Resource could not be found."
    code = 404


class FlavorNotFound(NotFound):
    msg_fmt = "Flavor %(flavor)s could not be found."


class InstanceNotFound(NotFound):
    msg_fmt = "Instance %(uuid)s could not be found."


class ComputeHostNotFound(NotFound):
    msg_fmt = "Compute host %(host)s could not be found."


class DomainNotFound(NotFound):
    msg_fmt = "Domain %(name)s could not be found on the hypervisor."


class InstanceInvalidState(NovaqError):
    msg_fmt = (
        "Cannot '%(action)s' instance %(uuid)s while it is in "
        "vm_state %(vm_state)s, task_state %(task_state)s."
    )
    code = 409


class UnexpectedTaskStateError(NovaqError):
    msg_fmt = (
        "Unexpected task state for instance %(uuid)s: expecting %(expected)s "
        "but the instance is in %(actual)s."
    )
    code = 409


class InvalidMigrationTransition(NovaqError):
    """A write of ``migrations.status`` that ``models.states.MIGRATION_TRANSITIONS`` does not
    allow: a bug in the writer, never a user error."""

    msg_fmt = "Migration %(migration)s cannot go from %(current)s to %(wanted)s."
    code = 409


class ClaimError(NovaqError):
    msg_fmt = "Claim failed: %(reason)s"


class ResourcesUnavailable(ClaimError):
    msg_fmt = "Insufficient compute resources on %(node)s: %(reason)s"


class GenerationConflict(ClaimError):
    msg_fmt = "Compute node %(node)s changed while claiming (generation %(generation)s)."
    code = 409


class NoValidHost(NovaqError):
    msg_fmt = "No valid host was found. %(reason)s"


class ComputeHostMetricNotFound(NoValidHost):
    """The MetricsWeigher met a host without a metric of ``[metrics] weight_setting``
    while ``[metrics] required`` is true: the request fails, as in Nova (enable the
    MetricsFilter to drop such hosts first)."""

    msg_fmt = "Metric %(name)s could not be found on the compute host node %(host)s.%(node)s."


class BuildError(NovaqError):
    msg_fmt = "Build of instance %(uuid)s failed: %(reason)s"


class RescheduleError(BuildError):
    msg_fmt = "Build of instance %(uuid)s was re-scheduled: %(reason)s"


class BuildAbortError(BuildError):
    msg_fmt = "Build of instance %(uuid)s aborted: %(reason)s"


class HypervisorError(NovaqError):
    msg_fmt = "Hypervisor error: %(reason)s"


class TriggerCrashDumpNotSupported(NovaqError):
    """Nova's: the hypervisor cannot inject an NMI (libvirt's ``VIR_ERR_NO_SUPPORT``)."""

    msg_fmt = "Triggering crash dump is not supported"
    code = 400


class InstanceNotRunning(NovaqError):
    """Nova's: the guest is not running (libvirt's ``VIR_ERR_OPERATION_INVALID``)."""

    msg_fmt = "Instance %(instance_id)s is not running."
    code = 400


class ImageUnacceptable(HypervisorError):
    """The image itself cannot become this guest's disk (it fails its checksum, is not
    what it claims, cannot be fetched, or is larger than the flavor's disk): as Nova's
    ``ImageUnacceptable``, a build aborts instead of rescheduling, since any other host
    would meet the same image."""

    msg_fmt = "Image %(image_id)s is unacceptable: %(reason)s"


class OperationFailed(NovaqError):
    """The operation ``wait`` watched ended (its action finished) and the server is not in
    the status waited for: the fault says why."""

    msg_fmt = (
        "The %(action)s of instance %(uuid)s ended with the server %(status)s, "
        "not %(wanted)s: %(fault)s"
    )


class InstanceErrored(OperationFailed):
    msg_fmt = "Instance %(uuid)s went to ERROR: %(fault)s"


class WaitTimeout(NovaqError):
    msg_fmt = "Instance %(uuid)s did not reach %(status)s within %(timeout)s s (now %(actual)s)."
    code = 408


# -- images --------------------------------------------------------------------------------


class ImageNotFound(NotFound):
    msg_fmt = "Image %(image_id)s could not be found."


class InvalidImage(InvalidInput):
    msg_fmt = "Invalid image: %(reason)s"


class ImageNotActive(InvalidInput):
    msg_fmt = "Image %(image_id)s is not active."


class FlavorMemoryTooSmall(InvalidInput):
    msg_fmt = "Flavor's memory is too small for requested image."


class FlavorDiskTooSmall(InvalidInput):
    msg_fmt = "The created instance's disk would be too small."


class FlavorDiskSmallerThanImage(FlavorDiskTooSmall):
    msg_fmt = (
        "Flavor's disk is too small for requested image. Flavor disk is "
        "%(flavor_size)i bytes, image is %(image_size)i bytes."
    )


class FlavorDiskSmallerThanMinDisk(FlavorDiskTooSmall):
    msg_fmt = (
        "Flavor's disk is smaller than the minimum size specified in image metadata. "
        "Flavor disk is %(flavor_size)i bytes, minimum size is %(image_min_disk)i bytes."
    )


class ImageStoreError(NovaqError):
    msg_fmt = "Image store error: %(reason)s"
    code = 503


class ComputeServiceInUse(InvalidInput):
    """Nova's refusal to evacuate a server whose compute service is still up."""

    msg_fmt = "Compute service of %(host)s is still in use."
