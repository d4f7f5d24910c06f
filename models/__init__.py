"""SQLAlchemy 2.x typed models, engine/session handling and Alembic migrations."""

from models.action import InstanceAction, InstanceActionEvent, InstanceFault
from models.aggregate import Aggregate, AggregateHost, AggregateMetadata
from models.allocation import Allocation
from models.base import Base, utcnow
from models.compute_node import ComputeNode
from models.console import ConsoleAuthToken
from models.delivery import TaskDelivery
from models.flavor import Flavor, FlavorExtraSpec
from models.heal import ResourceHeal
from models.host_mapping import HostMapping
from models.image import ContainerFormat, DiskFormat, Image, ImageStatus
from models.in_flight import OperationInFlight
from models.info_cache import InstanceInfoCache
from models.instance import Instance, InstanceMetadata
from models.liveness import ServiceLiveness
from models.migration import Migration
from models.pci_device import PciDevice
from models.periodic import BeatLease, PeriodicTaskRun
from models.server_group import ServerGroup, ServerGroupMember
from models.service import Service
from models.step_record import StepOutcome, StepRecord
from models.task_log import TaskLog
from models.volume_usage import VolumeUsage

__all__ = [
    "Aggregate",
    "AggregateHost",
    "AggregateMetadata",
    "ServerGroup",
    "ServerGroupMember",
    "Allocation",
    "BeatLease",
    "ConsoleAuthToken",
    "HostMapping",
    "ContainerFormat",
    "DiskFormat",
    "Image",
    "ImageStatus",
    "InstanceInfoCache",
    "PeriodicTaskRun",
    "TaskLog",
    "VolumeUsage",
    "Base",
    "ComputeNode",
    "Flavor",
    "FlavorExtraSpec",
    "Instance",
    "InstanceAction",
    "InstanceActionEvent",
    "InstanceFault",
    "Migration",
    "PciDevice",
    "ResourceHeal",
    "TaskDelivery",
    "OperationInFlight",
    "Service",
    "ServiceLiveness",
    "StepOutcome",
    "StepRecord",
    "utcnow",
    "InstanceMetadata",
]
