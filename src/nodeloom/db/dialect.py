"""The only place with SQL that differs between SQLite and PostgreSQL."""

from __future__ import annotations

import zlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from nodeloom.db.prepared import Prepared

_IGNORING: dict[tuple[str, Any], Prepared] = {}


def insert_ignoring_conflicts(conn: Connection, table: Any) -> Prepared:
    """INSERT ... ON CONFLICT DO NOTHING, spelled for the connection's database."""
    name = conn.dialect.name
    statement = _IGNORING.get((name, table))
    if statement is None:
        module = postgresql if name == "postgresql" else sqlite
        statement = Prepared(module.insert(table).on_conflict_do_nothing())
        _IGNORING[(name, table)] = statement
    return statement


def serialize(conn: Connection, name: str) -> None:
    """Make transactions that call this with the same ``name`` run one after another, until
    the caller's transaction ends. PostgreSQL: a transaction-scoped advisory lock. SQLite:
    nothing to do, its writers are serialized already (one writer, BEGIN IMMEDIATE)."""
    if conn.dialect.name == "postgresql":
        key = zlib.crc32(f"nodeloom:{name}".encode())
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
