"""app_challenges: an app's proof-of-work difficulty, and the challenges already used

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28

``apps.challenge_bits`` is how many leading zero bits a visitor's proof of work must reach
(null: the app asks for none). ``app_challenges`` keeps each challenge answered until it
expires, so one solution starts one run. A new nullable column and a new table: existing
apps keep asking for no proof.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.add_columns("apps", sa.Column("challenge_bits", sa.Integer(), nullable=True))
    op.create_table(
        "app_challenges",
        sa.Column("nonce", sa.String(64), primary_key=True),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_app_challenges_expires", "app_challenges", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_app_challenges_expires", table_name="app_challenges")
    op.drop_table("app_challenges")
    shapes.drop_columns("apps", "challenge_bits")
