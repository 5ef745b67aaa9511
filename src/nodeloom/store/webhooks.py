"""Webhook triggers, scoped to their account and workflow. Functions flush; the caller's
transaction commits.

Deleted webhooks are kept (soft delete) because runs refer to them. Every query here hides
deleted webhooks, and the trigger look-up also hides webhooks of deleted workflows, so
deleting a workflow stops its webhooks in the same commit without touching them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from nodeloom.db.models import Account, Webhook, Workflow, utcnow
from nodeloom.store.paging import after_cursor


async def create(
    session: AsyncSession,
    *,
    account_id: str,
    workflow_id: str,
    name: str,
    active: bool,
    token_hash: str,
    token_encrypted: str,
    secret_encrypted: str | None,
) -> Webhook:
    webhook = Webhook(
        id=str(uuid.uuid4()),
        account_id=account_id,
        workflow_id=workflow_id,
        name=name,
        active=active,
        token_hash=token_hash,
        token_encrypted=token_encrypted,
        secret_encrypted=secret_encrypted,
        created_at=utcnow(),
    )
    session.add(webhook)
    await session.flush()
    return webhook


async def page(
    session: AsyncSession, account_id: str, workflow_id: str, limit: int, cursor: str | None
) -> list[Webhook]:
    """Newest first, ``limit + 1`` rows so the caller can tell whether a next page exists."""
    query = (
        sa.select(Webhook)
        .where(
            Webhook.account_id == account_id,
            Webhook.workflow_id == workflow_id,
            Webhook.deleted_at.is_(None),
            after_cursor(Webhook.created_at, Webhook.id, cursor),
        )
        .order_by(Webhook.created_at.desc(), Webhook.id.desc())
        .limit(limit + 1)
    )
    return list(await session.scalars(query))


async def get(
    session: AsyncSession, account_id: str, workflow_id: str, webhook_id: str
) -> Webhook | None:
    return await session.scalar(
        sa.select(Webhook).where(
            Webhook.id == webhook_id,
            Webhook.account_id == account_id,
            Webhook.workflow_id == workflow_id,
            Webhook.deleted_at.is_(None),
        )
    )


async def update(
    session: AsyncSession,
    webhook: Webhook,
    *,
    name: str | None = None,
    active: bool | None = None,
    change_secret: bool = False,
    secret_encrypted: str | None = None,
) -> Webhook:
    """Change what is given; the secret only with ``change_secret`` (None then removes it)."""
    if name is not None:
        webhook.name = name
    if active is not None:
        webhook.active = active
    if change_secret:
        webhook.secret_encrypted = secret_encrypted
    await session.flush()
    return webhook


async def soft_delete(session: AsyncSession, webhook: Webhook) -> None:
    webhook.deleted_at = utcnow()
    await session.flush()


@dataclass(frozen=True)
class TriggerTarget:
    webhook_id: str
    account_id: str
    workflow_id: str
    active: bool
    plan: str
    secret_encrypted: str | None


async def for_trigger(session: AsyncSession, token_hash: str) -> TriggerTarget | None:
    """One indexed look-up per trigger: the webhook by its token's keyed hash, with its
    owner's current plan. Deleted webhooks and webhooks of deleted workflows are not found.

    The equality test happens on the keyed hash, which an attacker cannot choose, so an
    index look-up leaks nothing useful about stored tokens through timing."""
    row = (
        await session.execute(
            sa.select(
                Webhook.id,
                Webhook.account_id,
                Webhook.workflow_id,
                Webhook.active,
                Account.plan,
                Webhook.secret_encrypted,
            )
            .join(Workflow, Workflow.id == Webhook.workflow_id)
            .join(Account, Account.id == Webhook.account_id)
            .where(
                Webhook.token_hash == token_hash,
                Webhook.deleted_at.is_(None),
                Workflow.deleted_at.is_(None),
            )
        )
    ).first()
    if row is None:
        return None
    return TriggerTarget(row[0], row[1], row[2], bool(row[3]), row[4], row[5])
