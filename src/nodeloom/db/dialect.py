"""The only place with SQL that differs between SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Insert

_IGNORING: dict[tuple[str, Any], Insert] = {}


def insert_ignoring_conflicts(conn: Connection, table: Any) -> Insert:
    """INSERT ... ON CONFLICT DO NOTHING, spelled for the connection's database."""
    name = conn.dialect.name
    statement = _IGNORING.get((name, table))
    if statement is None:
        module = postgresql if name == "postgresql" else sqlite
        statement = module.insert(table).on_conflict_do_nothing()
        _IGNORING[(name, table)] = statement
    return statement
