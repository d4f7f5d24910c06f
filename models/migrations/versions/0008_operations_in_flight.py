"""operations in flight; the owner of each delivery

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import models.base

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "operations_in_flight",
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("task_state", sa.String(length=255), nullable=True),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("resent", sa.Integer(), nullable=False),
        sa.Column("host_down_since", models.base.UTCDateTime(), nullable=True),
        sa.Column("created_at", models.base.UTCDateTime(), nullable=False),
        sa.Column("updated_at", models.base.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("instance_uuid", name=op.f("pk_operations_in_flight")),
    )
    with op.batch_alter_table("task_deliveries") as batch:
        batch.add_column(sa.Column("worker", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("host", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("orphaned_at", models.base.UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_deliveries") as batch:
        batch.drop_column("orphaned_at")
        batch.drop_column("host")
        batch.drop_column("worker")
    op.drop_table("operations_in_flight")
