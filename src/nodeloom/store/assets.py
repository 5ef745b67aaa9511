"""Assets (files an account uploaded) and the storage they take: functions of a Core
connection, run by ``db.read`` / ``db.write``; the caller's transaction commits.

The storage an account holds is one counter row (``account_storage``), changed by one
conditional UPDATE in the transaction that inserts or deletes the asset: the check and the
change are one statement, so two uploads at once cannot both take the last bytes of a quota
on either database (SQLite runs writers one at a time; PostgreSQL re-checks the WHERE clause
on the row it locked).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db import dialect
from nodeloom.db.models import AccountStorage, Asset, Workflow, utcnow
from nodeloom.errors import StorageQuotaExceeded
from nodeloom.store import Record, rows
from nodeloom.store import artifacts as artifact_store
from nodeloom.store.paging import newest_first

ASSETS = cast(sa.Table, Asset.__table__)
STORAGE = cast(sa.Table, AccountStorage.__table__)
WORKFLOWS = cast(sa.Table, Workflow.__table__)
KINDS = ("image", "audio", "video")


@dataclass(frozen=True)
class NewAsset:
    """What the ingest measured of a stored file."""

    name: str
    kind: str
    content_type: str
    size_bytes: int
    sha256: str
    source_sha256: str
    source_format: str
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    video_codec: str | None = None
    audio_codec: str | None = None
    thumbnail_sha256: str | None = None
    thumbnail_bytes: int | None = None


def used_bytes(conn: Connection, account_id: str) -> int:
    value = conn.execute(
        sa.select(STORAGE.c.bytes_used).where(STORAGE.c.account_id == account_id)
    ).scalar()
    return int(value or 0)


def take(conn: Connection, account_id: str, size: int, quota: int) -> None:
    """Count ``size`` more bytes against ``quota``, or StorageQuotaExceeded."""
    dialect.insert_missing(conn, STORAGE, {"account_id": account_id, "bytes_used": 0})
    taken = conn.execute(
        sa.update(STORAGE)
        .where(STORAGE.c.account_id == account_id, STORAGE.c.bytes_used + size <= quota)
        .values(bytes_used=STORAGE.c.bytes_used + size)
    ).rowcount
    if taken != 1:
        raise StorageQuotaExceeded(size, used_bytes(conn, account_id), quota)


def give_back(conn: Connection, account_id: str, size: int) -> None:
    """``size`` bytes the account held (an asset deleted, an upload's hold) are free again."""
    if size > 0:
        conn.execute(
            sa.update(STORAGE)
            .where(STORAGE.c.account_id == account_id)
            .values(bytes_used=dialect.greatest(conn, STORAGE.c.bytes_used - size, 0))
        )


def create(conn: Connection, account_id: str, new: NewAsset, quota: int) -> Record:
    """Insert the asset, counting its bytes against ``quota``. The same content twice in
    one account is an IntegrityError (``ux_assets_content``): the caller answers the asset
    that holds it (``by_content``)."""
    take(conn, account_id, new.size_bytes, quota)
    return rows.insert(
        conn,
        ASSETS,
        id=str(uuid.uuid4()),
        account_id=account_id,
        tags=[],
        created_at=utcnow(),
        **new.__dict__,
    )


def _one(account_id: str, asset_id: str) -> Any:
    return sa.and_(ASSETS.c.id == asset_id, ASSETS.c.account_id == account_id)


def get(conn: Connection, account_id: str, asset_id: str) -> Record | None:
    return conn.execute(sa.select(ASSETS).where(_one(account_id, asset_id))).first()


def any_account(conn: Connection, asset_id: str) -> Record | None:
    """By id alone: for a signed URL, which is its own authorisation."""
    return conn.execute(sa.select(ASSETS).where(ASSETS.c.id == asset_id)).first()


def media_of(conn: Connection, account_id: str, reference: str) -> Record | None:
    """The account's asset, or else its artifact, with this id: a media input's file."""
    found = get(conn, account_id, reference)
    if found is not None:
        return found
    return artifact_store.owned(conn, account_id, reference)


def by_ids(conn: Connection, account_id: str, ids: list[str]) -> dict[str, Record]:
    if not ids:
        return {}
    query = sa.select(ASSETS).where(ASSETS.c.account_id == account_id, ASSETS.c.id.in_(ids))
    return {row.id: row for row in conn.execute(query)}


def by_content(conn: Connection, account_id: str, sha256: str) -> Record | None:
    """The account's asset holding these stored bytes."""
    query = sa.select(ASSETS).where(ASSETS.c.account_id == account_id, ASSETS.c.sha256 == sha256)
    return conn.execute(query).first()


def by_source(conn: Connection, account_id: str, source_sha256: str) -> Record | None:
    """The account's asset made of an upload with exactly these bytes (no need to decode
    them again)."""
    query = (
        sa.select(ASSETS)
        .where(ASSETS.c.account_id == account_id, ASSETS.c.source_sha256 == source_sha256)
        .limit(1)
    )
    return conn.execute(query).first()


def page(
    conn: Connection,
    account_id: str,
    limit: int,
    cursor: str | None,
    *,
    kind: str | None = None,
    search: str | None = None,
) -> list[Record]:
    """Newest first, ``limit + 1`` rows; ``kind`` filters, ``search`` matches a part of the
    name or a tag, case-insensitively."""
    query = sa.select(ASSETS).where(ASSETS.c.account_id == account_id)
    if kind is not None:
        query = query.where(ASSETS.c.kind == kind)
    if search:
        escaped = search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
        query = query.where(
            sa.or_(
                sa.func.lower(ASSETS.c.name).like(pattern, escape="\\"),
                sa.func.lower(sa.cast(ASSETS.c.tags, sa.Text)).like(pattern, escape="\\"),
            )
        )
    return list(conn.execute(newest_first(query, ASSETS, limit, cursor)).all())


def update(
    conn: Connection,
    account_id: str,
    asset_id: str,
    *,
    name: str | None,
    tags: list[str] | None,
) -> Record | None:
    values: dict[str, Any] = {}
    if name is not None:
        values["name"] = name
    if tags is not None:
        values["tags"] = tags
    if not values:
        return get(conn, account_id, asset_id)
    return rows.update(conn, ASSETS, _one(account_id, asset_id), **values)


def workflows_using(conn: Connection, account_id: str, asset_id: str) -> list[str]:
    """Ids of the account's workflows whose graph names the asset (an input node's
    default): the id appears in the graph's JSON text (ids are UUIDs, so no false match)."""
    query = sa.select(WORKFLOWS.c.id).where(
        WORKFLOWS.c.account_id == account_id,
        sa.cast(WORKFLOWS.c.graph_json, sa.Text).contains(asset_id, autoescape=True),
    )
    return sorted(conn.execute(query).scalars())


def delete(conn: Connection, account_id: str, asset_id: str) -> Record | None:
    """Delete the asset and give its bytes back to the account's quota; the deleted row."""
    row = conn.execute(
        sa.delete(ASSETS).where(_one(account_id, asset_id)).returning(*ASSETS.c)
    ).first()
    if row is not None:
        give_back(conn, account_id, row.size_bytes)
    return row


def referenced(conn: Connection, shas: list[str]) -> set[str]:
    """Of ``shas``, the blobs an asset holds (its file or its thumbnail)."""
    if not shas:
        return set()
    found = set(conn.execute(sa.select(ASSETS.c.sha256).where(ASSETS.c.sha256.in_(shas))).scalars())
    thumbs = sa.select(ASSETS.c.thumbnail_sha256).where(ASSETS.c.thumbnail_sha256.in_(shas))
    found.update(s for s in conn.execute(thumbs).scalars() if s)
    return found
