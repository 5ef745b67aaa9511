"""The only place with SQL that differs between SQLite and PostgreSQL."""

from __future__ import annotations

import zlib

import sqlalchemy as sa
from sqlalchemy.engine import Connection


def serialize(conn: Connection, name: str) -> None:
    """Make transactions that call this with the same ``name`` run one after another, until
    the caller's transaction ends. PostgreSQL: a transaction-scoped advisory lock. SQLite:
    nothing to do, its writers are serialized already (one writer, BEGIN IMMEDIATE)."""
    if conn.dialect.name == "postgresql":
        key = zlib.crc32(f"nodeloom:{name}".encode())
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
