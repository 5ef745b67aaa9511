"""schedules and run callbacks

Revision ID: 0012
Revises: 0009
Create Date: 2026-11-25

``schedules``: cron triggers of a workflow; ``next_run_at`` doubles as the claim that lets
exactly one process fire each time. ``callback_deliveries`` and ``callback_attempts``: the
signed POST of a finished run to its ``callback_url``, durable across restarts, with its
log. Accounts gain their callback signing secret (encrypted), webhooks a ``callback_url``
for the runs they start. The same statements run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.add_columns(
        "accounts",
        sa.Column("callback_secret_encrypted", sa.Text(), nullable=True),
        sa.Column("callback_secret_created_at", sa.DateTime(), nullable=True),
    )
    shapes.add_columns("webhooks", sa.Column("callback_url", sa.String(length=2048), nullable=True))
    op.create_table(
        "schedules",
        *shapes.account_row(),
        *shapes.reference("workflow_id", "workflows"),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("callback_url", sa.String(length=2048), nullable=True),
        sa.Column("next_run_at", sa.DateTime(), nullable=True),
        sa.Column("last_fired_at", sa.DateTime(), nullable=True),
        sa.Column("last_run_id", sa.String(length=36), nullable=True),
        sa.Column("last_error", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("input", sa.JSON(), nullable=True),
    )
    op.create_index(
        "ix_schedules_workflow", "schedules", ["workflow_id", "created_at", "id"], unique=False
    )
    shapes.create_partial_index("ix_schedules_due", "schedules", ["next_run_at"], where="active")
    op.create_table(
        "callback_deliveries",
        *shapes.uuid_key(),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        *shapes.reference("account_id", "accounts"),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("run_id"),
    )
    shapes.create_partial_index(
        "ix_callback_deliveries_due",
        "callback_deliveries",
        ["next_attempt_at"],
        where="state = 'pending'",
    )
    op.create_table(
        "callback_attempts",
        *shapes.reference("delivery_id", "callback_deliveries"),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("delivery_id", "attempt"),
    )


def downgrade() -> None:
    op.drop_table("callback_attempts")
    op.drop_index("ix_callback_deliveries_due", table_name="callback_deliveries")
    op.drop_table("callback_deliveries")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_index("ix_schedules_workflow", table_name="schedules")
    op.drop_table("schedules")
    shapes.drop_columns("webhooks", "callback_url")
    shapes.drop_columns("accounts", "callback_secret_created_at", "callback_secret_encrypted")
