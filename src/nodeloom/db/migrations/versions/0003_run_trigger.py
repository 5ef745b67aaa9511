"""web app: who started a run, and runs listed per account

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

``runs.trigger`` records what started a run (``api``, ``webhook`` or ``editor``) so the run
lists can show it; runs that came through a webhook before this column existed are marked
``webhook``. ``ix_runs_account_created`` serves the account-wide run list, newest first.
The same statements run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("trigger", sa.String(length=16), nullable=False, server_default="api")
        )
        batch_op.create_index(
            "ix_runs_account_created", ["account_id", "created_at", "id"], unique=False
        )
    op.execute("UPDATE runs SET trigger = 'webhook' WHERE webhook_id IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_account_created")
        batch_op.drop_column("trigger")
