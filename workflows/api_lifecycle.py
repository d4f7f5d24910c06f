"""The public API for the life of a server: stop, start, reboot, pause, suspend, rescue,
shelve, lock and their reverses, each refused in a state Nova refuses it."""

from __future__ import annotations

__all__: list[str] = []
