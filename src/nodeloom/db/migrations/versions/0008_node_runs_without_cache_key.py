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

from nodeloom.db.migrations import shapes

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.drop_columns("node_runs", "cache_key")


def downgrade() -> None:
    shapes.add_columns("node_runs", sa.Column("cache_key", sa.String(length=64), nullable=True))
