"""workflow versions

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

Every save of a workflow (create, update, restore) becomes an immutable row of
``workflow_versions``; ``workflows.version`` is the number of the current one and
``runs.workflow_version`` the one a run was started from. Existing workflows get their
current content as version 1 (author unknown: it was saved before versions existed); runs
started before this migration record no version. Downgrading drops the history.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflow_versions",
        *shapes.reference("workflow_id", "workflows"),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("author_account_id", sa.String(length=36), nullable=True),
        sa.Column("author_via", sa.String(length=16), nullable=True),
        sa.Column("author_api_key_id", sa.String(length=36), nullable=True),
        sa.Column("message", sa.String(length=1000), nullable=True),
        sa.Column("restored_from", sa.Integer(), nullable=True),
        sa.Column("graph_json", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("workflow_id", "number"),
    )
    shapes.add_columns(
        "workflows", sa.Column("version", sa.Integer(), nullable=False, server_default="1")
    )
    shapes.add_columns("runs", sa.Column("workflow_version", sa.Integer(), nullable=True))
    op.execute(
        "INSERT INTO workflow_versions (workflow_id, number, name, node_count, created_at, "
        "graph_json) SELECT id, 1, name, node_count, updated_at, graph_json FROM workflows"
    )


def downgrade() -> None:
    shapes.drop_columns("runs", "workflow_version")
    shapes.drop_columns("workflows", "version")
    op.drop_table("workflow_versions")
