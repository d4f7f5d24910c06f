"""compute_nodes.host_ip: the address each compute host reports (Nova's ``my_ip``)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing nodes get theirs at their host's next resource audit (NULL until then, as
    # a node Nova has not updated yet).
    with op.batch_alter_table("compute_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("host_ip", sa.String(length=39), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compute_nodes", schema=None) as batch_op:
        batch_op.drop_column("host_ip")
