"""Holding credits for a run: one conditional UPDATE, atomic on both databases.

Read-check-write would let two concurrent executes both see enough credits and both spend
them. ``UPDATE ... SET balance = balance - n WHERE id = ? AND balance >= n`` either holds
the whole estimate or changes nothing, so the balance can never go negative.
"""

from __future__ import annotations

from typing import NoReturn, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import AccountBalance, CreditEntry
from nodeloom.db.prepared import Prepared, created
from nodeloom.errors import InsufficientCredits

BALANCES = cast(sa.Table, AccountBalance.__table__)
_LEDGER = cast(sa.Table, CreditEntry.__table__)
HOLD = Prepared(
    sa.update(BALANCES)
    .where(
        BALANCES.c.account_id == sa.bindparam("account"),
        BALANCES.c.credits_balance >= sa.bindparam("amount"),
    )
    .values(
        credits_balance=BALANCES.c.credits_balance
        - sa.bindparam("amount")
        + sa.bindparam("give_back")
    )
)
# The hold of a run accepted in one statement of its own (``transitions.created_alone``),
# where no later statement can look at rows changed and refuse: when the balance no longer
# covers the hold it is set to -1, which the balance's CHECK refuses, and that error undoes
# the whole statement (the acceptance then runs as a transaction, which refuses with 402).
# Only if the run's row was inserted (``created()``).
HOLD_IF_CREATED = Prepared(
    sa.update(BALANCES)
    .where(BALANCES.c.account_id == sa.bindparam("account"), created())
    .values(
        credits_balance=sa.case(
            (
                BALANCES.c.credits_balance >= sa.bindparam("amount"),
                BALANCES.c.credits_balance - sa.bindparam("amount") + sa.bindparam("give_back"),
            ),
            else_=-1,
        )
    )
)
# A run's end gives back what it held and did not spend.
RELEASE = Prepared(
    sa.update(BALANCES)
    .where(BALANCES.c.account_id == sa.bindparam("account"))
    .values(credits_balance=BALANCES.c.credits_balance + sa.bindparam("amount"))
)
_BALANCE = Prepared(
    sa.select(BALANCES.c.credits_balance).where(BALANCES.c.account_id == sa.bindparam("account"))
)


def hold(account_id: str, amount: int, give_back: int = 0) -> tuple[Prepared, dict[str, object]]:
    """The UPDATE that holds ``amount``, with its parameters, for the caller to run in its
    transaction (``transitions.apply`` sends it with the batch's inserts); a change of 0 rows
    means the balance does not cover it: ``refuse``. ``give_back``: the part released at
    once, for a run that also ended in this transaction (hold and release in one UPDATE; the
    balance must still cover the whole hold). The caller writes the ledger rows."""
    return HOLD, {"account": account_id, "amount": amount, "give_back": give_back}


def refuse(conn: Connection, account_id: str, amount: int) -> NoReturn:
    """The hold of ``amount`` changed nothing: InsufficientCredits, with the balance."""
    available = _BALANCE.run(conn, {"account": account_id}).scalar()
    raise InsufficientCredits(required=amount, available=int(available or 0))


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
