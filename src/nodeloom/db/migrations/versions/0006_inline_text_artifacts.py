"""small text artifacts kept in their row

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

A text artifact of at most 64 KiB keeps its bytes in ``artifacts.data`` instead of a file
of the artifact store: it is written in the transaction that records it, read back with its
row, and a text pipeline no longer creates files (two per run for a two-node workflow, a
file system's inodes gone in hours at a thousand runs a second). Larger and binary
artifacts stay in the store (NULL here). The column is last, so queries that do not select
it never read its overflow pages.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("artifacts", sa.Column("data", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    op.drop_column("artifacts", "data")
