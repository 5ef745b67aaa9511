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
from alembic import op

revision = "0014"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("node_runs") as batch:
        batch.add_column(sa.Column("provider_job", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_runs") as batch:
        batch.drop_column("provider_job")
