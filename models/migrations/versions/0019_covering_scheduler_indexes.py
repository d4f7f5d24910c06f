"""covering indexes for the scheduler's reads: instances (host, deleted, vm_state,
task_state) replaces (host, deleted); allocations (compute_node_id, resource_class, used,
consumer_uuid) replaces (compute_node_id)

The candidate query's per-host counts and the claim's usage read of a node then read
only the index, never a table row. Each new index starts with the columns of the one it
replaces, so every lookup the old one served it serves, at no extra index per write.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_instances_host_deleted_vm_state_task_state",
        "instances",
        ["host", "deleted", "vm_state", "task_state"],
    )
    op.drop_index("ix_instances_host_deleted", table_name="instances")
    op.create_index(
        "ix_allocations_compute_node_usage",
        "allocations",
        ["compute_node_id", "resource_class", "used", "consumer_uuid"],
    )
    op.drop_index("ix_allocations_compute_node_id", table_name="allocations")


def downgrade() -> None:
    op.create_index("ix_allocations_compute_node_id", "allocations", ["compute_node_id"])
    op.drop_index("ix_allocations_compute_node_usage", table_name="allocations")
    op.create_index("ix_instances_host_deleted", "instances", ["host", "deleted"])
    op.drop_index("ix_instances_host_deleted_vm_state_task_state", table_name="instances")
