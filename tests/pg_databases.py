"""PostgreSQL databases for tests, cloned from the migrated template once and then reused.

A clone (``CREATE DATABASE ... TEMPLATE``) costs PostgreSQL about 0.25 s and dropping it
another few hundredths, for each of the 500-odd PostgreSQL tests; emptying a database a test
is done with costs about a hundredth. So a database a test gave back is emptied and handed
to the next test, and is as the template left it:

- every session still connected to it is ended first (nothing holds a lock, a LISTEN, an
  advisory lock or a prepared statement into the next test);
- its schema must still be the template's (tables, columns, indexes, functions, triggers,
  the migrations recorded): one that differs is dropped, not reused;
- the tables the template had empty are emptied (foreign keys and triggers off for that
  session only) and every sequence starts again, so ids restart as in a fresh clone;
- the rows it leaves dead are vacuumed away now and then (this machine runs PostgreSQL
  with autovacuum off).

Anything that fails on the way drops the database; the next test gets a fresh clone.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg

from tests.services import POSTGRES_ADMIN_URL

VACUUM_EVERY = 25  # reuses of one database between two vacuums

# The schema as one value: what a test could change that a later one would trip on.
_SCHEMA = """
SELECT md5(coalesce(string_agg(part, ',' ORDER BY part), '')) FROM (
    SELECT c.relname || ':' || c.relkind::text || ':' || c.relnatts AS part
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
       AND c.relkind <> 't' AND c.relpersistence <> 't'
    UNION ALL
    SELECT 'f:' || p.proname || ':' || md5(p.prosrc)
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
    UNION ALL
    SELECT 't:' || tgname FROM pg_trigger WHERE NOT tgisinternal
) parts
"""
_TABLES = """
SELECT quote_ident(schemaname) || '.' || quote_ident(tablename)
  FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
"""
_SEQUENCES = """
SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename)
  FROM pg_sequences WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
"""


def url_of(database: str) -> str:
    """The SQLAlchemy URL of ``database`` on the test server."""
    return POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + "/" + database


def _dsn(database: str) -> str:
    """The same for asyncpg itself."""
    return url_of(database).replace("postgresql+asyncpg://", "postgresql://", 1)


@dataclass
class _Shape:
    """The template as a reused database must be again."""

    schema: str
    kept: dict[str, int]  # tables the template fills (migration records): their row counts
    emptied: list[str]
    sequences: list[str]


@dataclass
class PostgresDatabases:
    """This test process's databases: lent one test at a time, emptied when given back."""

    template: str
    _idle: list[str] = field(default_factory=list)
    _uses: dict[str, int] = field(default_factory=dict)
    _shape: _Shape | None = None

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[str]:
        """A database as the template left it, for one test: its URL."""
        name = self._idle.pop() if self._idle else await self._clone()
        try:
            yield url_of(name)
        finally:
            if await self._emptied(name):
                self._idle.append(name)
            else:
                await admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                self._uses.pop(name, None)

    async def drop_all(self) -> None:
        for name in self._idle:
            await admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._idle.clear()

    async def _clone(self) -> str:
        name = f"nl_t_{uuid.uuid4().hex[:12]}"
        await admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        if self._shape is None:
            self._shape = await _shape_of(name)
        return name

    async def _emptied(self, name: str) -> bool:
        """Whether ``name`` is as the template left it again (else it is to be dropped)."""
        shape = self._shape
        assert shape is not None
        try:
            await admin(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            )
            conn = await asyncpg.connect(_dsn(name))
            try:
                if await conn.fetchval(_SCHEMA) != shape.schema:
                    return False
                for table, rows in shape.kept.items():
                    if await conn.fetchval(f"SELECT count(*) FROM {table}") != rows:
                        return False
                async with conn.transaction():
                    await conn.execute("SET LOCAL session_replication_role = replica")
                    await conn.execute(";".join(f"DELETE FROM {t}" for t in shape.emptied))
                    if shape.sequences:
                        await conn.execute(
                            ";".join(f"ALTER SEQUENCE {s} RESTART" for s in shape.sequences)
                        )
                self._uses[name] = self._uses.get(name, 0) + 1
                if self._uses[name] % VACUUM_EVERY == 0:
                    await conn.execute("VACUUM")
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return False
        return True


async def _shape_of(name: str) -> _Shape:
    conn = await asyncpg.connect(_dsn(name))
    try:
        tables = [r[0] for r in await conn.fetch(_TABLES)]
        kept: dict[str, int] = {}
        emptied: list[str] = []
        for table in tables:
            rows = await conn.fetchval(f"SELECT count(*) FROM {table}")
            if rows:
                kept[table] = rows
            else:
                emptied.append(table)
        sequences = [r[0] for r in await conn.fetch(_SEQUENCES)]
        return _Shape(await conn.fetchval(_SCHEMA), kept, emptied, sequences)
    finally:
        await conn.close()


async def admin(statement: str) -> None:
    """``statement`` on the server's admin database (CREATE and DROP DATABASE...)."""
    conn = await asyncpg.connect(_dsn(POSTGRES_ADMIN_URL.rsplit("/", 1)[1]))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()
