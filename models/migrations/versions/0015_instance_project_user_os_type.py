"""servers: project_id, user_id (the owner; existing servers get the demo project and
user) and os_type (the image's os_type property)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(
            sa.Column("project_id", sa.String(length=255), server_default="demo", nullable=False)
        )
        batch.add_column(
            sa.Column("user_id", sa.String(length=255), server_default="demo", nullable=False)
        )
        batch.add_column(sa.Column("os_type", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("os_type")
        batch.drop_column("user_id")
        batch.drop_column("project_id")
