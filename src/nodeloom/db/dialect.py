"""The only place with SQL that differs between SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import Insert


def insert_ignoring_conflicts(session: AsyncSession, table: Any) -> Insert:
    """INSERT ... ON CONFLICT DO NOTHING, spelled for the session's database."""
    bind = session.bind
    if bind is not None and bind.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()
