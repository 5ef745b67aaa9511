"""approvals: the decisions Approval nodes wait for

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27

One row per run and Approval node, written when the node starts waiting and decided once
(conditional UPDATE from ``pending``), by a person or by its timeout. The decision is the
durable truth of the wait: a node run again after a restart, on any process, reads it back.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        *shapes.account_row(),
        sa.Column("workflow_id", sa.String(36), nullable=False),
        *shapes.reference("run_id", "runs"),
        sa.Column("node_id", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("allow_edit", sa.Boolean(), nullable=False),
        sa.Column("timeout_outcome", sa.String(16), nullable=False),
        sa.Column("input_artifact_id", sa.String(36), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.Column("decided_by", sa.String(16), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
    )
    op.create_index("ux_approvals_node", "approvals", ["run_id", "node_id"], unique=True)
    shapes.create_partial_index(
        "ix_approvals_pending",
        "approvals",
        ["account_id", "created_at"],
        where="status = 'pending'",
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_pending", table_name="approvals")
    op.drop_index("ux_approvals_node", table_name="approvals")
    op.drop_table("approvals")
