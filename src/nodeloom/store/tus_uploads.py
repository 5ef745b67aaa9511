"""Resumable uploads (tus 1.0) being received: functions of a Core connection, run by
``db.read`` / ``db.write``; the caller's transaction commits.

A row is the whole state of an upload, so any replica takes any request for it:

- creation holds the declared length against the account's storage quota, in the
  statement that counts assets too (``assets.take``): uploads started at once cannot
  together promise more than the quota;
- one request writes it at a time: ``claim`` takes a lease (a token and ``busy_until``)
  only where the client's offset is the stored one, and every step of that request is
  conditional on its token, so a request that lost its lease (it stalled past it and
  another took over) stops without moving the offset;
- the hold is given back once, when the asset takes its own bytes, or the upload fails,
  is deleted or expires (``release_held``).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import TusUpload, utcnow
from nodeloom.store import Record, rows
from nodeloom.store import assets as asset_store

UPLOADS = cast(sa.Table, TusUpload.__table__)


def create(
    conn: Connection,
    account_id: str,
    *,
    length: int,
    name: str | None,
    metadata: str | None,
    storage: str,
    quota: int,
    expires_at: datetime,
) -> Record:
    """A new upload holding ``length`` bytes of ``quota`` (StorageQuotaExceeded if the
    account has not that much left)."""
    asset_store.take(conn, account_id, length, quota)
    return rows.insert(
        conn,
        UPLOADS,
        id=str(uuid.uuid4()),
        account_id=account_id,
        length=length,
        offset_bytes=0,
        held_bytes=length,
        name=name,
        upload_metadata=metadata,
        storage=storage,
        parts=[],
        created_at=utcnow(),
        expires_at=expires_at,
    )


def get(conn: Connection, account_id: str, upload_id: str) -> Record | None:
    """The account's upload, unless it has expired (then it reads as unknown)."""
    query = sa.select(UPLOADS).where(
        UPLOADS.c.id == upload_id,
        UPLOADS.c.account_id == account_id,
        UPLOADS.c.expires_at > utcnow(),
    )
    return conn.execute(query).first()


def set_multipart(conn: Connection, upload_id: str, multipart_id: str) -> None:
    conn.execute(
        sa.update(UPLOADS).where(UPLOADS.c.id == upload_id).values(multipart_id=multipart_id)
    )


def claim(
    conn: Connection, account_id: str, upload_id: str, offset: int, lease: str, seconds: float
) -> Record | None:
    """The upload, now leased to ``lease`` for ``seconds``, if it is at ``offset``, not
    finished and no other request holds it; None otherwise (the caller reads why)."""
    now = utcnow()
    free_at_offset = sa.and_(
        UPLOADS.c.id == upload_id,
        UPLOADS.c.account_id == account_id,
        UPLOADS.c.expires_at > now,
        UPLOADS.c.offset_bytes == offset,
        UPLOADS.c.asset_id.is_(None),
        UPLOADS.c.problem.is_(None),
        sa.or_(UPLOADS.c.busy_until.is_(None), UPLOADS.c.busy_until < now),
    )
    busy_until = now + timedelta(seconds=seconds)
    return rows.update(conn, UPLOADS, free_at_offset, lease=lease, busy_until=busy_until)


def _held(upload_id: str, lease: str) -> Any:
    return sa.and_(UPLOADS.c.id == upload_id, UPLOADS.c.lease == lease)


def renew(conn: Connection, upload_id: str, lease: str, seconds: float) -> bool:
    """Whether ``lease`` still holds the upload (for ``seconds`` more)."""
    return (
        conn.execute(
            sa.update(UPLOADS)
            .where(_held(upload_id, lease))
            .values(busy_until=utcnow() + timedelta(seconds=seconds))
        ).rowcount
        == 1
    )


def advance(
    conn: Connection,
    upload_id: str,
    lease: str,
    seconds: float,
    *,
    offset: int,
    parts: list[str],
    tail: bytes | None,
) -> bool:
    """Record bytes durably stored up to ``offset``; False if ``lease`` lost the upload."""
    return (
        conn.execute(
            sa.update(UPLOADS)
            .where(_held(upload_id, lease))
            .values(
                offset_bytes=offset,
                parts=parts,
                tail=tail,
                busy_until=utcnow() + timedelta(seconds=seconds),
            )
        ).rowcount
        == 1
    )


def unlock(conn: Connection, upload_id: str, lease: str) -> None:
    conn.execute(
        sa.update(UPLOADS).where(_held(upload_id, lease)).values(lease=None, busy_until=None)
    )


def release_held(conn: Connection, upload_id: str) -> None:
    """Give the upload's hold back to its account's quota, once: the read and the update
    are in one transaction, and the update is conditional on the value read."""
    held = conn.execute(
        sa.select(UPLOADS.c.account_id, UPLOADS.c.held_bytes).where(UPLOADS.c.id == upload_id)
    ).first()
    if held is None or held.held_bytes <= 0:
        return
    changed = conn.execute(
        sa.update(UPLOADS)
        .where(UPLOADS.c.id == upload_id, UPLOADS.c.held_bytes == held.held_bytes)
        .values(held_bytes=0)
    ).rowcount
    if changed == 1:
        asset_store.give_back(conn, held.account_id, held.held_bytes)


def finish(
    conn: Connection,
    upload_id: str,
    lease: str,
    *,
    asset_id: str | None = None,
    problem: dict[str, object] | None = None,
) -> None:
    """The upload is over: the asset it became, or the problem that refused it."""
    release_held(conn, upload_id)
    conn.execute(
        sa.update(UPLOADS)
        .where(_held(upload_id, lease))
        .values(asset_id=asset_id, problem=problem, lease=None, busy_until=None, tail=None)
    )


def delete(conn: Connection, account_id: str, upload_id: str) -> Record | None:
    """Remove the upload (termination), giving its hold back; the row removed."""
    row = get(conn, account_id, upload_id)
    if row is None:
        return None
    release_held(conn, upload_id)
    conn.execute(sa.delete(UPLOADS).where(UPLOADS.c.id == upload_id))
    return row


def expired(conn: Connection, limit: int) -> list[Record]:
    """Uploads past their expiry (not being written), oldest first."""
    now = utcnow()
    query = (
        sa.select(UPLOADS)
        .where(
            UPLOADS.c.expires_at <= now,
            sa.or_(UPLOADS.c.busy_until.is_(None), UPLOADS.c.busy_until < now),
        )
        .order_by(UPLOADS.c.expires_at)
        .limit(limit)
    )
    return list(conn.execute(query).all())


def forget(conn: Connection, upload_id: str) -> None:
    """Remove an expired upload's row, giving its hold back."""
    release_held(conn, upload_id)
    conn.execute(sa.delete(UPLOADS).where(UPLOADS.c.id == upload_id))
