"""Accounts and the credit ledger's grants: functions of a Core connection, run by
``db.read`` / ``db.write`` (the caller's transaction commits)."""

from __future__ import annotations

import uuid
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, AccountBalance, CreditEntry, utcnow
from nodeloom.store import Record

ACCOUNTS = cast(sa.Table, Account.__table__)
BALANCES = cast(sa.Table, AccountBalance.__table__)
_LEDGER = cast(sa.Table, CreditEntry.__table__)
# An account as read: its row with its balance, which lives in a row of its own (ADR 0023).
_WITH_BALANCE = sa.select(ACCOUNTS, BALANCES.c.credits_balance).join(
    BALANCES, BALANCES.c.account_id == ACCOUNTS.c.id
)


def count(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(ACCOUNTS)).scalar() or 0)


def create(conn: Connection, *, email: str, password_hash: str, plan: str, credits: int) -> Record:
    account_id = str(uuid.uuid4())
    conn.execute(
        sa.insert(ACCOUNTS).values(
            id=account_id,
            email=email,
            password_hash=password_hash,
            plan=plan,
            created_at=utcnow(),
            token_version=0,
            disabled_at=None,
        )
    )
    conn.execute(sa.insert(BALANCES).values(account_id=account_id, credits_balance=0))
    if credits:
        grant(conn, account_id, credits, note="initial credits")
    row = by_id(conn, account_id)
    assert row is not None
    return row


def by_email(conn: Connection, email: str) -> Record | None:
    return conn.execute(_WITH_BALANCE.where(ACCOUNTS.c.email == email)).first()


def by_id(conn: Connection, account_id: str) -> Record | None:
    return conn.execute(_WITH_BALANCE.where(ACCOUNTS.c.id == account_id)).first()


def is_operator(conn: Connection, account_id: str, emails: list[str]) -> bool:
    """Whether the account is an operator of the server: its e-mail among ``emails``, or,
    when none are configured, it is the first account (the owner)."""
    if emails:
        email = conn.execute(
            sa.select(ACCOUNTS.c.email).where(ACCOUNTS.c.id == account_id)
        ).scalar()
        return isinstance(email, str) and email.lower() in {e.lower() for e in emails}
    first = conn.execute(
        sa.select(ACCOUNTS.c.id).order_by(ACCOUNTS.c.created_at, ACCOUNTS.c.id).limit(1)
    ).scalar()
    return first == account_id


def list_all(conn: Connection) -> list[Record]:
    return list(conn.execute(_WITH_BALANCE.order_by(ACCOUNTS.c.created_at)).all())


def set_plan(conn: Connection, account_id: str, plan: str) -> None:
    conn.execute(sa.update(ACCOUNTS).where(ACCOUNTS.c.id == account_id).values(plan=plan))


def set_password(conn: Connection, account_id: str, password_hash: str) -> int:
    """Store a new password hash and bump the token version; the new version."""
    return int(
        conn.execute(
            sa.update(ACCOUNTS)
            .where(ACCOUNTS.c.id == account_id)
            .values(password_hash=password_hash, token_version=ACCOUNTS.c.token_version + 1)
            .returning(ACCOUNTS.c.token_version)
        ).scalar_one()
    )


def set_disabled(conn: Connection, account_id: str, disabled: bool) -> int:
    """Disable (every credential refused, the token version bumped) or enable an account;
    the token version afterwards."""
    values: dict[str, object] = {"disabled_at": utcnow() if disabled else None}
    if disabled:
        values["token_version"] = ACCOUNTS.c.token_version + 1
    return int(
        conn.execute(
            sa.update(ACCOUNTS)
            .where(ACCOUNTS.c.id == account_id)
            .values(**values)
            .returning(ACCOUNTS.c.token_version)
        ).scalar_one()
    )


def grant(conn: Connection, account_id: str, amount: int, note: str) -> None:
    """Add (or, negative, take back) credits, recorded in the ledger as a grant."""
    result = conn.execute(
        sa.update(BALANCES)
        .where(BALANCES.c.account_id == account_id, BALANCES.c.credits_balance + amount >= 0)
        .values(credits_balance=BALANCES.c.credits_balance + amount)
    )
    if result.rowcount != 1:
        raise ValueError("a grant cannot make the balance negative")
    conn.execute(
        sa.insert(_LEDGER).values(
            account_id=account_id,
            run_id="",
            node_id="",
            kind="grant",
            amount=amount,
            note=note,
            created_at=utcnow(),
        )
    )


def set_credits(conn: Connection, account_id: str, credits: int) -> None:
    balance = conn.execute(
        sa.select(BALANCES.c.credits_balance).where(BALANCES.c.account_id == account_id)
    ).scalar()
    if balance is not None and balance != credits:
        grant(conn, account_id, credits - balance, note="set by administrator")
