"""the output cache is looked up on the artifacts it points at

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

A completed node's cache key was a row of its own in ``cache_entries`` (account, key ->
artifact): one more table written at every node end. The key is now a column of the artifact
the node produced, indexed per account, so recording an output records its key in the same
row. Several artifacts of an account may share a key (runs with the cache off, two runs
racing to the same output): the look-up takes the one with the highest id, one index probe
whatever their number. The existing entries are carried over onto their artifacts;
downgrading rebuilds the table from the column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("artifacts", sa.Column("cache_key", sa.String(length=64), nullable=True))
    # Without it, the UPDATE below scans every entry for every artifact (minutes at 30,000).
    op.create_index("ix_cache_entries_artifact", "cache_entries", ["artifact_id"])
    op.execute(
        "UPDATE artifacts SET cache_key = (SELECT c.cache_key FROM cache_entries c"
        " WHERE c.artifact_id = artifacts.id AND c.account_id = artifacts.account_id LIMIT 1)"
        " WHERE id IN (SELECT artifact_id FROM cache_entries)"
    )
    shapes.create_partial_index(
        "ix_artifacts_cache",
        "artifacts",
        ["account_id", "cache_key", "id"],
        where="cache_key IS NOT NULL",
    )
    op.drop_table("cache_entries")


def downgrade() -> None:
    shapes.create_cache_entries()
    op.execute(
        "INSERT INTO cache_entries (account_id, cache_key, artifact_id, created_at)"
        " SELECT account_id, cache_key, max(id), max(created_at) FROM artifacts"
        " WHERE cache_key IS NOT NULL GROUP BY account_id, cache_key"
    )
    op.drop_index("ix_artifacts_cache", table_name="artifacts")
    op.drop_column("artifacts", "cache_key")
