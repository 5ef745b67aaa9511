"""API keys: look-up by keyed hash, listing and revocation (functions of a Core
connection, run by ``db.read`` / ``db.write``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import ApiKey, utcnow
from nodeloom.store import Record, rows

KEYS = cast(sa.Table, ApiKey.__table__)


def create(conn: Connection, *, account_id: str, name: str, prefix: str, key_hash: str) -> Record:
    key_id = str(uuid.uuid4())
    return rows.insert(
        conn,
        KEYS,
        id=key_id,
        account_id=account_id,
        name=name,
        prefix=prefix,
        key_hash=key_hash,
        created_at=utcnow(),
        last_used_at=None,
        revoked_at=None,
    )


def list_for(conn: Connection, account_id: str) -> list[Record]:
    query = (
        sa.select(KEYS)
        .where(KEYS.c.account_id == account_id)
        .order_by(KEYS.c.created_at.desc(), KEYS.c.id.desc())
    )
    return list(conn.execute(query).all())


def active_count(conn: Connection, account_id: str) -> int:
    query = sa.select(sa.func.count()).where(
        KEYS.c.account_id == account_id, KEYS.c.revoked_at.is_(None)
    )
    return int(conn.execute(query).scalar() or 0)


def revoke(conn: Connection, account_id: str, key_id: str) -> bool:
    result = conn.execute(
        sa.update(KEYS)
        .where(KEYS.c.id == key_id, KEYS.c.account_id == account_id)
        .values(revoked_at=sa.func.coalesce(KEYS.c.revoked_at, utcnow()))
    )
    return bool(result.rowcount)


def touch(conn: Connection, uses: dict[str, datetime]) -> None:
    """Record when each key was last used (one statement per batch)."""
    if uses:
        conn.execute(
            sa.update(KEYS)
            .where(KEYS.c.id == sa.bindparam("key"))
            .values(last_used_at=sa.bindparam("when", type_=KEYS.c.last_used_at.type)),
            [{"key": key_id, "when": when} for key_id, when in uses.items()],
        )
