"""Holding credits for a run: one conditional UPDATE, atomic on both databases.

Read-check-write would let two concurrent executes both see enough credits and both spend
them. ``UPDATE ... SET balance = balance - n WHERE id = ? AND balance >= n`` either holds
the whole estimate or changes nothing, so the balance can never go negative.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, CreditEntry
from nodeloom.errors import InsufficientCredits

_ACCOUNTS = cast(sa.Table, Account.__table__)
_LEDGER = cast(sa.Table, CreditEntry.__table__)
_HOLD = (
    sa.update(_ACCOUNTS)
    .where(
        _ACCOUNTS.c.id == sa.bindparam("account"),
        _ACCOUNTS.c.credits_balance >= sa.bindparam("amount"),
    )
    .values(credits_balance=_ACCOUNTS.c.credits_balance - sa.bindparam("amount"))
)
_BALANCE = sa.select(_ACCOUNTS.c.credits_balance).where(_ACCOUNTS.c.id == sa.bindparam("account"))
_INSERT_LEDGER = sa.insert(_LEDGER)


def hold(conn: Connection, account_id: str, run_id: str, amount: int, at: datetime) -> None:
    if amount > 0:
        result = conn.execute(_HOLD, {"account": account_id, "amount": amount})
        if result.rowcount != 1:
            available = conn.execute(_BALANCE, {"account": account_id}).scalar()
            raise InsufficientCredits(required=amount, available=int(available or 0))
    conn.execute(
        _INSERT_LEDGER,
        {
            "account_id": account_id,
            "run_id": run_id,
            "node_id": "",
            "kind": "hold",
            "amount": amount,
            "note": None,
            "created_at": at,
        },
    )


def ledger_balance(conn: Connection, account_id: str) -> int:
    """The balance recomputed from the ledger: grants - holds + releases."""
    ledger = cast(sa.Table, CreditEntry.__table__)
    signed = sa.case(
        (ledger.c.kind == "grant", ledger.c.amount),
        (ledger.c.kind == "hold", -ledger.c.amount),
        (ledger.c.kind == "release", ledger.c.amount),
        else_=0,
    )
    total = conn.execute(
        sa.select(sa.func.coalesce(sa.func.sum(signed), 0)).where(ledger.c.account_id == account_id)
    ).scalar()
    return int(total or 0)
