"""apps: workflows published as pages, and the runs started through them

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28

An app pins a saved version of a workflow, the form it shows and its limits; ``app_runs``
ties each run started through an app to the app and to the (hashed) visitor token that
reads it. Both are new tables: nothing existing changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "apps",
        *shapes.account_row(),
        *shapes.reference("workflow_id", "workflows"),
        sa.Column("workflow_version", sa.Integer(), nullable=False),
        sa.Column("slug", sa.String(64), nullable=False, unique=True),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("cover_asset_id", sa.String(36), nullable=True),
        sa.Column("access", sa.String(16), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=True),
        sa.Column("published", sa.Boolean(), nullable=False),
        sa.Column("budget_daily", sa.Integer(), nullable=True),
        sa.Column("budget_total", sa.Integer(), nullable=True),
        sa.Column("max_concurrent", sa.Integer(), nullable=True),
        sa.Column("rate_per_visitor", sa.Integer(), nullable=False),
        sa.Column("rate_per_ip", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.Column("frame_ancestors", sa.JSON(), nullable=False),
    )
    op.create_index("ix_apps_account_created", "apps", ["account_id", "created_at", "id"])
    op.create_table(
        "app_runs",
        *shapes.reference("run_id", "runs"),
        *shapes.reference("app_id", "apps"),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_index("ix_app_runs_app_created", "app_runs", ["app_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_app_runs_app_created", table_name="app_runs")
    op.drop_table("app_runs")
    op.drop_index("ix_apps_account_created", table_name="apps")
    op.drop_table("apps")
