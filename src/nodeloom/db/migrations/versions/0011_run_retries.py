"""retry from the failed node: a run remembers the run it retries

Revision ID: 0011
Revises: 0009
Create Date: 2026-11-25

``runs.retried_from`` names the failed or cancelled run a retry started from (NULL for any
other run); ``ix_runs_retried_from`` lists a run's retries. A plain column, not a foreign
key: a run and its retries are deleted together with their workflow, and the column must
not stop either from going first. The same statements run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("retried_from", sa.String(length=36), nullable=True))
        batch_op.create_index("ix_runs_retried_from", ["retried_from"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_retried_from")
        batch_op.drop_column("retried_from")
