"""images: the image registry

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import models.base

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "images",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("disk_format", sa.String(length=16), nullable=False),
        sa.Column("container_format", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("virtual_size", sa.BigInteger(), nullable=True),
        sa.Column("os_hash_algo", sa.String(length=16), nullable=False),
        sa.Column("os_hash_value", sa.String(length=128), nullable=True),
        sa.Column("min_disk", sa.Integer(), nullable=False),
        sa.Column("min_ram", sa.Integer(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("location", sa.String(length=1024), nullable=True),
        sa.Column("created_at", models.base.UTCDateTime(), nullable=False),
        sa.Column("updated_at", models.base.UTCDateTime(), nullable=True),
        sa.Column("deleted_at", models.base.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_images")),
    )
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_images_name"), ["name"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_images_name"))
    op.drop_table("images")
