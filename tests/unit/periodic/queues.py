"""Reading what was published to an in-memory broker queue."""

from __future__ import annotations

from typing import Any

from celery import Celery


def drain(app: Celery, queue: str) -> list[Any]:
    """Every message waiting in ``queue``, acked (the queue is left empty)."""
    messages = []
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue(queue)
        while True:
            try:
                message = simple.get(block=False)
            except simple.Empty:
                break
            messages.append(message)
            message.ack()
        simple.close()
    return messages
