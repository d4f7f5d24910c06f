"""flavors: soft delete and private flavors (is_public, flavor_projects)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import models.base

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("flavors") as batch:
        batch.add_column(
            sa.Column("is_public", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch.add_column(sa.Column("deleted_at", models.base.UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("deleted", sa.Integer(), server_default="0", nullable=False))
        # A deleted flavor keeps its name and id; a new one may take them again.
        batch.drop_constraint("uq_flavors_name", type_="unique")
        batch.drop_constraint("uq_flavors_flavorid", type_="unique")
        batch.create_unique_constraint("uq_flavors_name_deleted", ["name", "deleted"])
        batch.create_unique_constraint("uq_flavors_flavorid_deleted", ["flavorid", "deleted"])
    op.create_table(
        "flavor_projects",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("flavor_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", models.base.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["flavor_id"],
            ["flavors.id"],
            name=op.f("fk_flavor_projects_flavor_id_flavors"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_flavor_projects")),
        sa.UniqueConstraint(
            "flavor_id", "project_id", name=op.f("uq_flavor_projects_flavor_id_project_id")
        ),
    )


def downgrade() -> None:
    op.drop_table("flavor_projects")
    # A deleted flavor stays (instances refer to it) but gives its name and id up to the
    # old unique constraints, and stays hidden as a disabled flavor. (Row by row: string
    # concatenation is spelled differently by SQLite, PostgreSQL and MariaDB.)
    flavors = sa.table(
        "flavors",
        sa.column("id", sa.Integer),
        sa.column("name", sa.String),
        sa.column("flavorid", sa.String),
        sa.column("disabled", sa.Boolean),
        sa.column("deleted", sa.Integer),
    )
    bind = op.get_bind()
    for (row_id,) in bind.execute(sa.select(flavors.c.id).where(flavors.c.deleted != 0)).all():
        hidden = f"deleted-{row_id}"
        bind.execute(
            flavors.update()
            .where(flavors.c.id == row_id)
            .values(name=hidden, flavorid=hidden, disabled=True)
        )
    with op.batch_alter_table("flavors") as batch:
        batch.drop_constraint("uq_flavors_flavorid_deleted", type_="unique")
        batch.drop_constraint("uq_flavors_name_deleted", type_="unique")
        batch.create_unique_constraint("uq_flavors_flavorid", ["flavorid"])
        batch.create_unique_constraint("uq_flavors_name", ["name"])
        batch.drop_column("deleted")
        batch.drop_column("deleted_at")
        batch.drop_column("is_public")
