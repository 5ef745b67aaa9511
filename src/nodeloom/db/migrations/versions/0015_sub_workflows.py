"""sub-workflows: a run started by a Workflow node is linked to its parent, and back

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25

``runs.parent_run_id``/``runs.parent_node_id`` name the run and the ``Workflow`` node that
started a run (NULL for any other run); the unique index ``ux_runs_parent`` allows one child
per parent node, so a parent resumed after a crash finds its child instead of starting a
second one (NULLs are distinct on both databases: other runs are not constrained).
``node_runs.child_run_id`` is the link the other way. Plain columns, not foreign keys, as
``retried_from``: parent and child are deleted with their own workflows, in any order.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent_run_id", sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column("parent_node_id", sa.String(length=200), nullable=True))
        batch_op.create_index("ux_runs_parent", ["parent_run_id", "parent_node_id"], unique=True)
    shapes.add_columns("node_runs", sa.Column("child_run_id", sa.String(length=36), nullable=True))


def downgrade() -> None:
    shapes.drop_columns("node_runs", "child_run_id")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ux_runs_parent")
        batch_op.drop_column("parent_node_id")
        batch_op.drop_column("parent_run_id")
