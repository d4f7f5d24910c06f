"""step records: every step of a server's workflow, kept after it returned

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import models.base

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "step_records",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("task_name", sa.String(length=255), nullable=False),
        sa.Column("parent_id", sa.String(length=255), nullable=True),
        sa.Column("queue", sa.String(length=255), nullable=True),
        sa.Column("worker", sa.String(length=255), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("delivery_log", sa.Text(), nullable=False),
        sa.Column("started_at", models.base.UTCDateTime(), nullable=False),
        sa.Column("ended_at", models.base.UTCDateTime(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("vm_state_before", sa.String(length=255), nullable=True),
        sa.Column("task_state_before", sa.String(length=255), nullable=True),
        sa.Column("power_state_before", sa.Integer(), nullable=True),
        sa.Column("vm_state_after", sa.String(length=255), nullable=True),
        sa.Column("task_state_after", sa.String(length=255), nullable=True),
        sa.Column("power_state_after", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step_records")),
        sa.UniqueConstraint(
            "task_id", "instance_uuid", name=op.f("uq_step_records_task_id_instance_uuid")
        ),
    )
    op.create_index(
        "ix_step_records_instance_uuid_started_at",
        "step_records",
        ["instance_uuid", "started_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_step_records_instance_uuid_started_at", table_name="step_records")
    op.drop_table("step_records")
