"""The Celery app and its thin task wrappers (``celery -A tasks worker`` finds ``app``)."""

from tasks.celery import app

__all__ = ["app"]
