"""``novaq`` commands for the life of a server (stop, start, reboot, pause, …)."""

from __future__ import annotations
