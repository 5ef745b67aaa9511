"""credential versions, disabled accounts, revocation feed, idempotency fingerprints

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        # Bumped when the password changes or the account is disabled: every JWT issued
        # before carries the old value and is refused from then on.
        batch_op.add_column(
            sa.Column("token_version", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("disabled_at", sa.DateTime(), nullable=True))
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("request_hash", sa.String(length=64), nullable=True))
    op.create_table(
        "credential_revocations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("scope", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("credential_revocations")
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_column("request_hash")
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        batch_op.drop_column("disabled_at")
        batch_op.drop_column("token_version")
