"""comfyui_drains: ComfyUI servers drained with the Drain button

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29

One row per drained server (of the shared pool or of a comfyui credential's fleet), read by
every process that routes prompts. A new table only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "comfyui_drains",
        sa.Column("server_id", sa.String(32), primary_key=True),
        sa.Column("fleet", sa.String(80), nullable=False),
        sa.Column("base_url", sa.String(2000), nullable=False),
        *shapes.reference("credential_id", "credentials", nullable=True),
        *shapes.reference("drained_by", "accounts", nullable=True, ondelete="SET NULL"),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("comfyui_drains")
