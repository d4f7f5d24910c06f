"""services: disk_endpoint, the URL of a compute host's disk endpoint (the moved-aside
disks of a move in progress, ``virt.transfer``), written when its worker registers

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.add_column(sa.Column("disk_endpoint", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.drop_column("disk_endpoint")
