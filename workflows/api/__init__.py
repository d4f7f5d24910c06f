"""novaq's public Python API: ``from workflows import api``.

Every call returns at once: it validates, writes what it must in one short transaction,
and only then enqueues the workflow (broker checked first, so a down broker changes
nothing). ``wait`` polls the database. Bad input raises a ``novaq`` error before anything
is written or enqueued.

This package only gathers the calls; they live by subject in its modules
(``workflows/api/<subject>.py``), each listing its public calls in ``__all__``.
"""

from __future__ import annotations

from workflows.api import (
    admin,
    cells,
    consoles,
    flavor_admin,
    hosts,
    images,
    lifecycle,
    moves,
    servers,
)
from workflows.api import rebuild as _rebuild  # the module; api.rebuild is the call
from workflows.api import timeline as _timeline  # likewise
from workflows.api.admin import *  # noqa: F403
from workflows.api.cells import *  # noqa: F403
from workflows.api.consoles import *  # noqa: F403
from workflows.api.flavor_admin import *  # noqa: F403
from workflows.api.hosts import *  # noqa: F403
from workflows.api.images import *  # noqa: F403
from workflows.api.lifecycle import *  # noqa: F403
from workflows.api.moves import *  # noqa: F403
from workflows.api.rebuild import *  # noqa: F403
from workflows.api.servers import *  # noqa: F403
from workflows.api.timeline import *  # noqa: F403

__all__ = sorted(
    {
        *admin.__all__,
        *cells.__all__,
        *consoles.__all__,
        *images.__all__,
        *lifecycle.__all__,
        *moves.__all__,
        *servers.__all__,
        *flavor_admin.__all__,
        *hosts.__all__,
        *_timeline.__all__,
        *_rebuild.__all__,
    }
)
