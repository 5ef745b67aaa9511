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

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("callback_secret_encrypted", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("callback_secret_created_at", sa.DateTime(), nullable=True))
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("callback_url", sa.String(length=2048), nullable=True))
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("account_id", sa.String(length=36), nullable=False),
        sa.Column("workflow_id", sa.String(length=36), nullable=False),
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
        sa.ForeignKeyConstraint(["account_id"], ["accounts.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["workflow_id"], ["workflows.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_schedules_workflow", "schedules", ["workflow_id", "created_at", "id"], unique=False
    )
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_run_at"],
        unique=False,
        sqlite_where=sa.text("active"),
        postgresql_where=sa.text("active"),
    )
    op.create_table(
        "callback_deliveries",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("account_id", sa.String(length=36), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["account_id"], ["accounts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )
    op.create_index(
        "ix_callback_deliveries_due",
        "callback_deliveries",
        ["next_attempt_at"],
        unique=False,
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_table(
        "callback_attempts",
        sa.Column("delivery_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["delivery_id"], ["callback_deliveries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("delivery_id", "attempt"),
    )


def downgrade() -> None:
    op.drop_table("callback_attempts")
    op.drop_index("ix_callback_deliveries_due", table_name="callback_deliveries")
    op.drop_table("callback_deliveries")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_index("ix_schedules_workflow", table_name="schedules")
    op.drop_table("schedules")
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_column("callback_url")
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        batch_op.drop_column("callback_secret_created_at")
        batch_op.drop_column("callback_secret_encrypted")
