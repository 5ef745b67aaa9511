"""node runs no longer keep their cache key

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

Since 0007 the output cache is looked up on the artifacts (``artifacts.cache_key``); the copy
of the key on each node run was written at every node end and read by nothing. Downgrading
brings the column back, empty (nothing read it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("node_runs") as batch:
        batch.drop_column("cache_key")


def downgrade() -> None:
    with op.batch_alter_table("node_runs") as batch:
        batch.add_column(sa.Column("cache_key", sa.String(length=64), nullable=True))
