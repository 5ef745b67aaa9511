"""scale-out: the queued node state, node claims, run drivers; Procrastinate's job tables

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

- ``node_runs.claimed_by`` names who runs a node (a server process or a queue job) and
  ``queued_at`` when it became runnable; a partial index finds queued nodes quickly.
- ``runs.driver`` names the process that drives a run in the embedded mode; the unused lease
  columns and the in-memory sequence mirror ``event_seq`` go (an event's seq comes from the
  run's event log itself).
- Procrastinate's schema (the job queue on PostgreSQL) was installed here; it is now
  installed, and brought up to the installed release, after the Alembic migrations by
  ``nodeloom db upgrade`` (db/procrastinate_queue.py, ADR 0042). A database that ran this
  revision before has the schema of Procrastinate 3.10.0, which that step knows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.add_columns(
        "node_runs",
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.Column("queued_at", sa.DateTime(), nullable=True),
    )
    shapes.create_partial_index(
        "ix_node_runs_queued", "node_runs", ["queued_at"], where="status = 'queued'"
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_status_lease")
        batch_op.drop_column("lease_owner")
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("event_seq")
        batch_op.add_column(sa.Column("driver", sa.String(length=64), nullable=True))
    shapes.create_partial_index("ix_runs_running", "runs", ["driver"], where="status = 'running'")


def downgrade() -> None:
    # Procrastinate's tables stay: they hold nothing of ours once no worker runs.
    op.drop_index("ix_runs_running", table_name="runs")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("driver")
        batch_op.add_column(
            sa.Column("event_seq", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("lease_expires_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_runs_status_lease", ["status", "lease_expires_at"])
    op.drop_index("ix_node_runs_queued", table_name="node_runs")
    shapes.drop_columns("node_runs", "queued_at", "claimed_by")
