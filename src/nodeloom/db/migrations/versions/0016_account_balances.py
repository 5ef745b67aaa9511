"""account balances in a table of their own

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26

``accounts.credits_balance`` moves to ``account_balances`` (one row per account, the same
check that it never goes below zero). The balance changes with every run accepted and
ended; the account row is what the foreign keys of runs, artifacts and ledger entries
reference, and on PostgreSQL each of their checks locks it. A row under constant update
made those checks cost several times the rest of an acceptance (ADR 0023). The downgrade
puts the balances back on their accounts.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nodeloom.db.migrations import shapes

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shapes.create_per_account_count(
        "account_balances", "credits_balance", check_name="ck_account_balances_balance"
    )
    op.execute(
        "INSERT INTO account_balances (account_id, credits_balance)"
        " SELECT id, credits_balance FROM accounts"
    )
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        batch_op.drop_constraint("ck_accounts_balance", type_="check")
        batch_op.drop_column("credits_balance")


def downgrade() -> None:
    shapes.add_columns(
        "accounts",
        sa.Column("credits_balance", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.execute(
        "UPDATE accounts SET credits_balance = (SELECT b.credits_balance FROM account_balances b"
        " WHERE b.account_id = accounts.id)"
        " WHERE id IN (SELECT account_id FROM account_balances)"
    )
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        batch_op.alter_column("credits_balance", server_default=None)
        batch_op.create_check_constraint("ck_accounts_balance", "credits_balance >= 0")
    op.drop_table("account_balances")
