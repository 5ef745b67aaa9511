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


def insert_missing(conn: Connection, table: sa.Table, values: dict[str, object]) -> bool:
    """Insert the row unless one with the same key is there (ON CONFLICT DO NOTHING); True
    when it was inserted."""
    from sqlalchemy.dialects import postgresql, sqlite

    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    result = conn.execute(insert(table).values(values).on_conflict_do_nothing())
    return bool(result.rowcount)


def greatest(conn: Connection, *values: object) -> sa.ColumnElement[object]:
    """The largest of ``values`` (SQLite's multi-argument ``max``, PostgreSQL's
    ``greatest``)."""
    name = "greatest" if conn.dialect.name == "postgresql" else "max"
    return getattr(sa.func, name)(*values)  # type: ignore[no-any-return]
