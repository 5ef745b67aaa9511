"""Accounts and the credit ledger's grants. Functions flush; the caller's transaction commits."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from nodeloom.db.models import Account, CreditEntry, utcnow


async def count(session: AsyncSession) -> int:
    return int(await session.scalar(sa.select(sa.func.count()).select_from(Account)) or 0)


async def create(
    session: AsyncSession, *, email: str, password_hash: str, plan: str, credits: int
) -> Account:
    account = Account(
        id=str(uuid.uuid4()),
        email=email,
        password_hash=password_hash,
        plan=plan,
        credits_balance=0,
        created_at=utcnow(),
    )
    session.add(account)
    await session.flush()
    if credits:
        await grant(session, account.id, credits, note="initial credits")
        await session.refresh(account)
    return account


async def by_email(session: AsyncSession, email: str) -> Account | None:
    return await session.scalar(sa.select(Account).where(Account.email == email))


async def by_id(session: AsyncSession, account_id: str) -> Account | None:
    return await session.get(Account, account_id)


async def plan_of(session: AsyncSession, account_id: str) -> str | None:
    return await session.scalar(sa.select(Account.plan).where(Account.id == account_id))


async def list_all(session: AsyncSession) -> list[Account]:
    return list(await session.scalars(sa.select(Account).order_by(Account.created_at)))


async def set_plan(session: AsyncSession, account_id: str, plan: str) -> None:
    await session.execute(sa.update(Account).where(Account.id == account_id).values(plan=plan))


async def grant(session: AsyncSession, account_id: str, amount: int, note: str) -> None:
    """Add (or, negative, take back) credits, recorded in the ledger as a grant."""
    result = await session.execute(
        sa.update(Account)
        .where(Account.id == account_id, Account.credits_balance + amount >= 0)
        .values(credits_balance=Account.credits_balance + amount)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise ValueError("a grant cannot make the balance negative")
    session.add(
        CreditEntry(
            account_id=account_id, kind="grant", amount=amount, note=note, created_at=utcnow()
        )
    )
    await session.flush()


async def set_credits(session: AsyncSession, account_id: str, credits: int) -> None:
    balance = await session.scalar(
        sa.select(Account.credits_balance).where(Account.id == account_id)
    )
    if balance is not None and balance != credits:
        await grant(session, account_id, credits - balance, note="set by administrator")
