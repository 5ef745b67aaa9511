"""API keys: look-up by keyed hash, listing and revocation."""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from nodeloom.db.models import ApiKey, utcnow


async def create(
    session: AsyncSession, *, account_id: str, name: str, prefix: str, key_hash: str
) -> ApiKey:
    key = ApiKey(
        id=str(uuid.uuid4()),
        account_id=account_id,
        name=name,
        prefix=prefix,
        key_hash=key_hash,
        created_at=utcnow(),
    )
    session.add(key)
    await session.flush()
    return key


async def list_for(session: AsyncSession, account_id: str) -> list[ApiKey]:
    query = (
        sa.select(ApiKey)
        .where(ApiKey.account_id == account_id)
        .order_by(ApiKey.created_at.desc(), ApiKey.id.desc())
    )
    return list(await session.scalars(query))


async def revoke(session: AsyncSession, account_id: str, key_id: str) -> bool:
    result = await session.execute(
        sa.update(ApiKey)
        .where(ApiKey.id == key_id, ApiKey.account_id == account_id)
        .values(revoked_at=sa.func.coalesce(ApiKey.revoked_at, utcnow()))
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def touch(session: AsyncSession, key_ids: list[str], when: datetime) -> None:
    await session.execute(sa.update(ApiKey).where(ApiKey.id.in_(key_ids)).values(last_used_at=when))
