"""novaq's psycopg connection: a reader's transaction (``READ ONLY``) ends with COMMIT.

psycopg drops every statement it has prepared on a connection at each ROLLBACK, with one
more round trip (``DEALLOCATE ALL``), because it cannot tell what a failed transaction
left prepared. Every reader's transaction (``session_scope(read_only=True)``) ended with
one: a scheduling decision paid that round trip, and no statement ever stayed prepared
long enough (psycopg prepares one at its fifth run on a connection) to save its planning
(the candidate query's is 0.5 ms at 100 hosts).

A transaction that is ``READ ONLY`` and not failed has written nothing, so COMMIT ends it
exactly as ROLLBACK would; SQLAlchemy still sees (and its events count) a rollback. A
failed one, or any writer's, rolls back as before.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, event


class ReaderCommitsConnection(psycopg.Connection[Any]):
    def rollback(self) -> None:
        if self.read_only and self.info.transaction_status == TransactionStatus.INTRANS:
            self.commit()
        else:
            super().rollback()


def use_reader_commits(engine: Engine) -> None:
    """``engine``'s new connections are ``ReaderCommitsConnection``s (SQLAlchemy's
    ``do_connect`` hook: the dialect's own connect arguments, another class)."""

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect, _record, cargs, cparams):  # type: ignore[no-untyped-def]
        return ReaderCommitsConnection.connect(*cargs, **cparams)
