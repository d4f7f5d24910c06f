"""novaq's public Python API: ``from workflows import api``.

Every call returns at once: it validates, writes what it must in one short transaction,
and only then enqueues the workflow (broker checked first, so a down broker changes
nothing). ``wait`` polls the database. Bad input raises a ``novaq`` error before anything
is written or enqueued.

This module only gathers the calls; they live by subject in ``workflows/api_*.py``, each
listing its public calls in ``__all__``.
"""

from __future__ import annotations

from workflows import (
    api_admin,
    api_cells,
    api_consoles,
    api_images,
    api_lifecycle,
    api_moves,
    api_servers,
)
from workflows.api_admin import *  # noqa: F403
from workflows.api_cells import *  # noqa: F403
from workflows.api_consoles import *  # noqa: F403
from workflows.api_images import *  # noqa: F403
from workflows.api_lifecycle import *  # noqa: F403
from workflows.api_moves import *  # noqa: F403
from workflows.api_servers import *  # noqa: F403

__all__ = sorted(
    {
        *api_admin.__all__,
        *api_cells.__all__,
        *api_consoles.__all__,
        *api_images.__all__,
        *api_lifecycle.__all__,
        *api_moves.__all__,
        *api_servers.__all__,
    }
)
