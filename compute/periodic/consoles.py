"""``_cleanup_expired_console_auth_tokens``: delete the console tokens that have expired
(Nova's task of the same name). Tokens are not host-scoped in Nova either, so novaq runs
it once for the cluster, on the maintenance queue, instead of on every compute host."""

from __future__ import annotations

import logging
from typing import Any

from compute.consoles import delete_expired_tokens
from compute.periodic import PeriodicContext

LOG = logging.getLogger(__name__)


def cleanup_expired_console_auth_tokens(ctx: PeriodicContext) -> dict[str, Any]:
    with ctx.sessions() as session:
        deleted = delete_expired_tokens(session)
    if deleted:
        LOG.info("Deleted %d expired console auth tokens", deleted)
    return {"deleted": deleted}
