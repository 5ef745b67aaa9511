"""per-account provider credentials

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

One table: a credential's non-secret fields as JSON, its secret fields encrypted with the
server secret, and a masked hint. Downgrading drops it (and the credentials with it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "credentials",
        *shapes.account_row(),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=False),
        sa.Column("secret_encrypted", sa.Text(), nullable=False),
        sa.Column("hint", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_credentials_account", "credentials", ["account_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_credentials_account", table_name="credentials")
    op.drop_table("credentials")
