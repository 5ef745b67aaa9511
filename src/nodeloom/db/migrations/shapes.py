"""Column groups, tables and index forms that more than one migration writes.

Frozen with the migrations that call it: a database that ran a revision has the schema these
functions gave it then, and running that revision again (a fresh database, a downgrade and an
upgrade) must give the same. Never change what a function here builds, not even for a new
migration: that one writes its own shape out, or adds a function of its own beside these.
The models (db/models.py) are free to move on; this module is history.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

UUID_LENGTH = 36


def uuid_key() -> tuple[sa.Column[Any], sa.PrimaryKeyConstraint]:
    """The ``id`` column of a row keyed by a UUID, and its primary key."""
    return (
        sa.Column("id", sa.String(length=UUID_LENGTH), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def reference(
    column: str, table: str, *, nullable: bool = False, ondelete: str = "CASCADE"
) -> tuple[sa.Column[Any], sa.ForeignKeyConstraint]:
    """A column holding the UUID of a row of ``table``, and its foreign key."""
    return (
        sa.Column(column, sa.String(length=UUID_LENGTH), nullable=nullable),
        sa.ForeignKeyConstraint([column], [f"{table}.id"], ondelete=ondelete),
    )


def account_row() -> tuple[Any, ...]:
    """The ``id`` and owning ``account_id`` a row of an account's begins with (deleting the
    account deletes the row)."""
    return (*uuid_key(), *reference("account_id", "accounts"))


def create_per_account_count(table: str, column: str, check_name: str) -> None:
    """A table of one count per account that never goes below zero."""
    op.create_table(
        table,
        sa.Column("account_id", sa.String(length=UUID_LENGTH), nullable=False),
        sa.Column(column, sa.BigInteger(), nullable=False),
        sa.CheckConstraint(f"{column} >= 0", name=check_name),
        sa.ForeignKeyConstraint(["account_id"], ["accounts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("account_id"),
    )


def create_cache_entries() -> None:
    """``cache_entries`` as 0001 created it (and 0007's downgrade brings it back)."""
    op.create_table(
        "cache_entries",
        sa.Column("account_id", sa.String(length=UUID_LENGTH), nullable=False),
        sa.Column("cache_key", sa.String(length=64), nullable=False),
        sa.Column("artifact_id", sa.String(length=UUID_LENGTH), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["account_id"], ["accounts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("account_id", "cache_key"),
    )


def where_on_both(predicate: str) -> dict[str, Any]:
    """The keywords that make an index partial on SQLite and PostgreSQL alike (each dialect
    reads only its own)."""
    return {"sqlite_where": sa.text(predicate), "postgresql_where": sa.text(predicate)}


def create_partial_index(
    name: str, table: str, columns: list[str], where: str, *, unique: bool = False
) -> None:
    """An index of the rows of ``table`` that match ``where`` only."""
    op.create_index(name, table, columns, unique=unique, **where_on_both(where))


def add_columns(table: str, *columns: sa.Column[Any]) -> None:
    """Add ``columns`` to ``table`` (in a batch, so SQLite rebuilds the table if it must)."""
    with op.batch_alter_table(table) as batch:
        for column in columns:
            batch.add_column(column)


def drop_columns(table: str, *names: str) -> None:
    """Drop the columns ``names`` from ``table``, in that order (in a batch, as above)."""
    with op.batch_alter_table(table) as batch:
        for name in names:
            batch.drop_column(name)
