"""Recovery at a compute worker's start (Nova's ``init_host``): ``init_host`` walks the
host's instances and finishes or undoes each interrupted step (``resume`` re-runs host
steps, ``moves`` recovers migrations, ``common`` holds what they share)."""

from compute.recovery.init_host import recover_host

__all__ = ["recover_host"]
