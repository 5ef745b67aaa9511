"""A row written and read back whole in the same statement (``RETURNING``), as every store
answers a create or an update: the caller gets the row as the database now holds it, server
defaults and concurrent changes included, without a second query."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.store import Record


def insert(conn: Connection, table: sa.Table, /, **values: Any) -> Record:
    """Insert one row of ``values``; the row as stored."""
    return conn.execute(sa.insert(table).values(**values).returning(*table.c)).one()


def update(
    conn: Connection, table: sa.Table, where: sa.ColumnElement[bool], /, **values: Any
) -> Record | None:
    """Change the row ``where`` picks; the row as changed, or None when none matched."""
    statement = sa.update(table).where(where).values(**values).returning(*table.c)
    return conn.execute(statement).first()
