"""Compute-queue tasks for the life of a server: thin wrappers over ``compute/lifecycle.py``."""

from __future__ import annotations
