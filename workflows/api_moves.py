"""The public API for moves: resize, confirm and revert, cold migrate, and migrations."""

from __future__ import annotations

__all__: list[str] = []
