"""servers: a description and user metadata (Nova's instance_metadata)

Revision ID: 0012
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("description", sa.String(length=255), nullable=True))
    op.create_table(
        "instance_metadata",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["instance_uuid"],
            ["instances.uuid"],
            name=op.f("fk_instance_metadata_instance_uuid_instances"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_metadata")),
        sa.UniqueConstraint(
            "instance_uuid", "key", name=op.f("uq_instance_metadata_instance_uuid_key")
        ),
    )


def downgrade() -> None:
    op.drop_table("instance_metadata")
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("description")
