"""the provider job a node run waits on

Revision ID: 0014
Revises: 0009
Create Date: 2026-11-25

``node_runs.provider_job``: what a provider node (nodes/adapters) submitted to its provider
(the provider's prediction, prompt or request id, and what it was for), committed before
the node waits on it. A node run again after its process stopped attaches to that job
instead of submitting (and paying for) it a second time. Downgrading drops the column.
"""

from __future__ import annotations

import sqlalchemy as sa

from nodeloom.db.migrations import shapes

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.add_columns("node_runs", sa.Column("provider_job", sa.JSON(), nullable=True))


def downgrade() -> None:
    shapes.drop_columns("node_runs", "provider_job")
