"""Artifact rows (the bytes are in the artifact store): functions of a Core connection, run
by ``db.read``."""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Artifact, CacheEntry
from nodeloom.db.prepared import Prepared
from nodeloom.store import Record

ARTIFACTS = cast(sa.Table, Artifact.__table__)
_CACHE = cast(sa.Table, CacheEntry.__table__)
_CACHED = Prepared(
    sa.select(ARTIFACTS)
    .join(_CACHE, _CACHE.c.artifact_id == ARTIFACTS.c.id)
    .where(
        _CACHE.c.account_id == sa.bindparam("account"), _CACHE.c.cache_key == sa.bindparam("key")
    )
)


def owned(conn: Connection, account_id: str, artifact_id: str) -> Record | None:
    query = sa.select(ARTIFACTS).where(
        ARTIFACTS.c.id == artifact_id, ARTIFACTS.c.account_id == account_id
    )
    return conn.execute(query).first()


def any_account(conn: Connection, artifact_id: str) -> Record | None:
    """By id alone: for a signed URL, which is its own authorisation."""
    return conn.execute(sa.select(ARTIFACTS).where(ARTIFACTS.c.id == artifact_id)).first()


def by_ids(conn: Connection, ids: list[str]) -> dict[str, Record]:
    if not ids:
        return {}
    rows = conn.execute(sa.select(ARTIFACTS).where(ARTIFACTS.c.id.in_(ids)))
    return {row.id: row for row in rows}


_CACHED_MANY = Prepared(
    sa.select(_CACHE.c.cache_key, *ARTIFACTS.c)
    .join(_CACHE, _CACHE.c.artifact_id == ARTIFACTS.c.id)
    .where(
        _CACHE.c.account_id == sa.bindparam("account"),
        _CACHE.c.cache_key.in_(sa.bindparam("keys", expanding=True)),
    )
)


def cached(conn: Connection, account_id: str, cache_key: str) -> Record | None:
    """The artifact an earlier completed node with this cache key produced."""
    return _CACHED.run(conn, {"account": account_id, "key": cache_key}).first()


def cached_many(conn: Connection, account_id: str, keys: list[str]) -> dict[str, Record]:
    """``cached`` for several keys at once: the artifact of each key found."""
    if not keys:
        return {}
    rows = _CACHED_MANY.run(conn, {"account": account_id, "keys": keys})
    return {row.cache_key: row for row in rows}
