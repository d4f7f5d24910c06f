"""Alembic environment: runs novaq's migrations against the URL handed in by
``models.migrate`` (``config.attributes['url']``) or ``sqlalchemy.url``."""

from __future__ import annotations

from alembic import context

from models import Base
from models.db import get_engine

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not isinstance(url, str):
        raise RuntimeError("alembic needs a database url (attributes['url'] or sqlalchemy.url)")
    engine = get_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations_online()
