"""the outputs a node with branches took

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27

``node_runs.ports`` lists the outputs a completed node with branches took (an If's
``true`` or ``false``, a Switch's case); NULL for every other node, whose outputs all carry
its artifact. It is written with the node's completion, so a run resumed after a crash
knows which edges lead on without running the node again (a Merge fed by both branches
waits for the one taken, and skips when none is).
"""

from __future__ import annotations

import sqlalchemy as sa

from nodeloom.db.migrations import shapes

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.add_columns("node_runs", sa.Column("ports", sa.JSON(), nullable=True))


def downgrade() -> None:
    shapes.drop_columns("node_runs", "ports")
