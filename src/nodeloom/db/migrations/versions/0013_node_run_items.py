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
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("node_runs") as batch:
        batch.add_column(sa.Column("item_index", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_runs") as batch:
        batch.drop_column("item_index")
