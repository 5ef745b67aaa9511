"""Artifact rows (the bytes are in the artifact store): functions of a Core connection, run
by ``db.read``."""

from __future__ import annotations

import functools
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Artifact, NodeRun
from nodeloom.db.prepared import Prepared
from nodeloom.store import Record

ARTIFACTS = cast(sa.Table, Artifact.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)
# Keys looked up in one statement at most (a run's nodes are looked up together).
CACHE_KEYS_PER_QUERY = 64


def _newest_for_key(index: int) -> sa.Subquery:
    """An artifact of the account for the ``index``-th key, the one with the highest id
    (normally the newest): one index probe, however many share the key (runs with the cache
    off store every output; all of them hold the same bytes)."""
    return (
        sa.select(ARTIFACTS)
        .where(
            ARTIFACTS.c.account_id == sa.bindparam("account"),
            ARTIFACTS.c.cache_key == sa.bindparam(f"k{index}"),
        )
        .order_by(ARTIFACTS.c.id.desc())
        .limit(1)
        .subquery()
    )


@functools.cache
def _cached_query(keys: int) -> Prepared:
    """The look-up of ``keys`` keys at once: one indexed probe per key, their rows together."""
    probes = [sa.select(_newest_for_key(i)) for i in range(keys)]
    return Prepared(probes[0] if keys == 1 else sa.union_all(*probes))


def owned(conn: Connection, account_id: str, artifact_id: str) -> Record | None:
    query = sa.select(ARTIFACTS).where(
        ARTIFACTS.c.id == artifact_id, ARTIFACTS.c.account_id == account_id
    )
    return conn.execute(query).first()


def owned_with_producer(conn: Connection, account_id: str, artifact_id: str) -> Record | None:
    """``owned``, with the type and status of the node run that produced it
    (``producer_type``, ``producer_status``; NULL once that run is gone)."""
    query = (
        sa.select(
            ARTIFACTS,
            _NODES.c.type.label("producer_type"),
            _NODES.c.status.label("producer_status"),
        )
        .select_from(
            ARTIFACTS.outerjoin(
                _NODES,
                sa.and_(
                    _NODES.c.run_id == ARTIFACTS.c.run_id,
                    _NODES.c.node_id == ARTIFACTS.c.node_id,
                ),
            )
        )
        .where(ARTIFACTS.c.id == artifact_id, ARTIFACTS.c.account_id == account_id)
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


def cached(conn: Connection, account_id: str, cache_key: str) -> Record | None:
    """The artifact an earlier completed node with this cache key produced."""
    return _cached_query(1).run(conn, {"account": account_id, "k0": cache_key}).first()


def cached_many(conn: Connection, account_id: str, keys: list[str]) -> dict[str, Record]:
    """``cached`` for several keys at once: the artifact of each key found."""
    found: dict[str, Record] = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), CACHE_KEYS_PER_QUERY):
        chunk = unique[start : start + CACHE_KEYS_PER_QUERY]
        params = {"account": account_id, **{f"k{i}": key for i, key in enumerate(chunk)}}
        for row in _cached_query(len(chunk)).run(conn, params):
            found[row.cache_key] = row
    return found
