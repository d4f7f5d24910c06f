"""``novaq`` commands for moves (resize, resize-confirm, resize-revert, migrate, migration-list)."""

from __future__ import annotations
