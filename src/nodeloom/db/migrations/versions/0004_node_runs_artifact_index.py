"""node runs by artifact, for retention

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

Retention keeps an artifact while any kept run shows it (a cache hit shares the artifact of
an earlier run); this index answers that without a scan of every node run.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_node_runs_artifact", "node_runs", ["artifact_id"])


def downgrade() -> None:
    op.drop_index("ix_node_runs_artifact", table_name="node_runs")
