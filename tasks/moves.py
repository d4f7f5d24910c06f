"""Tasks of moves (resize, cold migrate, confirm, revert): thin wrappers over
``compute/moves.py``."""

from __future__ import annotations
