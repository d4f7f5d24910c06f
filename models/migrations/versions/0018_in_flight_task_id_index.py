"""operations in flight: an index on task_id (every step's end finds its rows by it)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_operations_in_flight_task_id", "operations_in_flight", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_operations_in_flight_task_id", table_name="operations_in_flight")
