"""tus_uploads: resumable uploads being received

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29

One row per resumable upload (tus 1.0): its account, declared length, bytes received, the
bytes it holds against the storage quota, where its bytes wait (a part file or an S3
multipart upload), the request writing it now, and the asset it became. A new table only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tus_uploads",
        *shapes.account_row(),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("offset_bytes", sa.BigInteger(), nullable=False),
        sa.Column("held_bytes", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("upload_metadata", sa.Text(), nullable=True),
        sa.Column("storage", sa.String(8), nullable=False),
        sa.Column("multipart_id", sa.String(1024), nullable=True),
        sa.Column("parts", sa.JSON(), nullable=False),
        sa.Column("tail", sa.LargeBinary(), nullable=True),
        sa.Column("lease", sa.String(32), nullable=True),
        sa.Column("busy_until", sa.DateTime(), nullable=True),
        sa.Column("asset_id", sa.String(36), nullable=True),
        sa.Column("problem", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_tus_uploads_account", "tus_uploads", ["account_id"])
    op.create_index("ix_tus_uploads_expires", "tus_uploads", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_tus_uploads_expires", table_name="tus_uploads")
    op.drop_index("ix_tus_uploads_account", table_name="tus_uploads")
    op.drop_table("tus_uploads")
