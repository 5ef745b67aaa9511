"""credential versions, disabled accounts, revocation feed, idempotency fingerprints

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.add_columns(
        "accounts",
        # Bumped when the password changes or the account is disabled: every JWT issued
        # before carries the old value and is refused from then on.
        sa.Column("token_version", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("disabled_at", sa.DateTime(), nullable=True),
    )
    shapes.add_columns(
        "idempotency_keys", sa.Column("request_hash", sa.String(length=64), nullable=True)
    )
    op.create_table(
        "credential_revocations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("scope", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("credential_revocations")
    shapes.drop_columns("idempotency_keys", "request_hash")
    shapes.drop_columns("accounts", "disabled_at", "token_version")
