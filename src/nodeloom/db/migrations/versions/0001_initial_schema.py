"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "accounts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("plan", sa.String(length=16), nullable=False),
        sa.Column("credits_balance", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("credits_balance >= 0", name="ck_accounts_balance"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("email"),
    )
    op.create_table(
        "api_keys",
        *shapes.account_row(),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("key_hash"),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index("ix_api_keys_account", ["account_id", "created_at"], unique=False)

    op.create_table(
        "artifacts",
        *shapes.account_row(),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("workflow_id", sa.String(length=36), nullable=False),
        sa.Column("node_id", sa.String(length=200), nullable=False),
        sa.Column("content_type", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("width", sa.Integer(), nullable=True),
        sa.Column("height", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    shapes.create_cache_entries()
    op.create_table(
        "credit_ledger",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        *shapes.reference("account_id", "accounts"),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("node_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("credit_ledger", schema=None) as batch_op:
        batch_op.create_index("ix_ledger_account", ["account_id", "id"], unique=False)
        batch_op.create_index(
            "uq_ledger_run_node_kind",
            ["run_id", "node_id", "kind"],
            unique=True,
            **shapes.where_on_both("run_id != ''"),
        )

    op.create_table(
        "idempotency_keys",
        *shapes.reference("account_id", "accounts"),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("account_id", "key"),
    )
    op.create_table(
        "workflows",
        *shapes.account_row(),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("graph_json", sa.JSON(), nullable=False),
    )
    with op.batch_alter_table("workflows", schema=None) as batch_op:
        batch_op.create_index(
            "ix_workflows_account_created", ["account_id", "created_at", "id"], unique=False
        )

    op.create_table(
        "runs",
        *shapes.account_row(),
        *shapes.reference("workflow_id", "workflows"),
        sa.Column("webhook_id", sa.String(length=36), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("use_cache", sa.Boolean(), nullable=False),
        sa.Column("estimated_credits", sa.BigInteger(), nullable=False),
        sa.Column("credits_used", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("event_seq", sa.Integer(), nullable=False),
        sa.Column("input", sa.JSON(), nullable=True),
        sa.Column("graph_json", sa.JSON(), nullable=False),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_status_lease", ["status", "lease_expires_at"], unique=False)
        batch_op.create_index(
            "ix_runs_workflow_created", ["workflow_id", "created_at", "id"], unique=False
        )

    op.create_table(
        "webhooks",
        *shapes.account_row(),
        *shapes.reference("workflow_id", "workflows"),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_encrypted", sa.Text(), nullable=False),
        sa.Column("secret_encrypted", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.create_index("ix_webhooks_workflow", ["workflow_id", "created_at"], unique=False)

    op.create_table(
        "node_runs",
        *shapes.reference("run_id", "runs"),
        sa.Column("node_id", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("artifact_id", sa.String(length=36), nullable=True),
        sa.Column("credits_used", sa.BigInteger(), nullable=False),
        sa.Column("cached", sa.Boolean(), nullable=False),
        sa.Column("cache_key", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "node_id"),
    )
    op.create_table(
        "run_events",
        *shapes.reference("run_id", "runs"),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("node_id", sa.String(length=200), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("ts", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )


def downgrade() -> None:

    op.drop_table("run_events")
    op.drop_table("node_runs")
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_index("ix_webhooks_workflow")

    op.drop_table("webhooks")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_workflow_created")
        batch_op.drop_index("ix_runs_status_lease")

    op.drop_table("runs")
    with op.batch_alter_table("workflows", schema=None) as batch_op:
        batch_op.drop_index("ix_workflows_account_created")

    op.drop_table("workflows")
    op.drop_table("idempotency_keys")
    with op.batch_alter_table("credit_ledger", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_ledger_run_node_kind",
            **shapes.where_on_both("run_id != ''"),
        )
        batch_op.drop_index("ix_ledger_account")

    op.drop_table("credit_ledger")
    op.drop_table("cache_entries")
    op.drop_table("artifacts")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_api_keys_account")

    op.drop_table("api_keys")
    op.drop_table("accounts")
