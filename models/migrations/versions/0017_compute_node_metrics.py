"""compute nodes: the resource monitors' metrics (Nova's compute_nodes.metrics)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.add_column(sa.Column("metrics", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.drop_column("metrics")
