"""assets: files an account uploads, and the storage each account holds

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27

``assets`` holds one row per file an account brought (its stored blob after conversion,
what was sent, its measurements, name and tags); ``ux_assets_content`` makes the same stored
content one asset per account. ``account_storage`` counts the bytes each account's assets
take, changed by one conditional statement per upload and delete so a quota holds under
concurrent uploads (see docs/adr/0026-uploads-streamed-and-counted.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "assets",
        *shapes.account_row(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("content_type", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=False),
        sa.Column("source_format", sa.String(length=32), nullable=False),
        sa.Column("width", sa.Integer(), nullable=True),
        sa.Column("height", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("video_codec", sa.String(length=32), nullable=True),
        sa.Column("audio_codec", sa.String(length=32), nullable=True),
        sa.Column("thumbnail_sha256", sa.String(length=64), nullable=True),
        sa.Column("thumbnail_bytes", sa.Integer(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_assets_account", "assets", ["account_id", "created_at"])
    op.create_index("ux_assets_content", "assets", ["account_id", "sha256"], unique=True)
    op.create_index("ix_assets_source", "assets", ["account_id", "source_sha256"])
    shapes.create_per_account_count(
        "account_storage", "bytes_used", check_name="ck_account_storage_bytes"
    )


def downgrade() -> None:
    op.drop_table("account_storage")
    op.drop_index("ix_assets_source", table_name="assets")
    op.drop_index("ux_assets_content", table_name="assets")
    op.drop_index("ix_assets_account", table_name="assets")
    op.drop_table("assets")
