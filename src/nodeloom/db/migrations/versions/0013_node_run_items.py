"""the item index of a node run (batches)

Revision ID: 0013
Revises: 0009
Create Date: 2026-11-25

A ForEach node runs the nodes after it once per item; each item's node run is a row of its
own, keyed by the instance id ``<node id>#<item>``, with the item index in this column
(NULL for nodes that run once). Adding a nullable column rewrites nothing on either
database; downgrading drops it.
"""

from __future__ import annotations

import sqlalchemy as sa

from nodeloom.db.migrations import shapes

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.add_columns("node_runs", sa.Column("item_index", sa.Integer(), nullable=True))


def downgrade() -> None:
    shapes.drop_columns("node_runs", "item_index")
