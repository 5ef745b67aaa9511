"""The one way to reach the database: ``await db.read(fn)`` and ``await db.write(fn)``, where
``fn`` is a plain function of a SQLAlchemy Core ``Connection`` (the store modules and the
engine's steps are such functions, one module per aggregate). The same code runs on SQLite and
PostgreSQL; only how it is run differs.

SQLite (one file, one writer at a time):

- Reads run on the event loop, on a pooled connection in a deferred transaction (WAL: a
  read never waits for a lock, and an indexed read takes microseconds, less than any hop to a
  thread would cost).
- Writes go through one writer connection, in ``BEGIN IMMEDIATE`` transactions, one at a
  time per process. Writes submitted in the same loop iteration share one transaction (group
  commit), each in its own SAVEPOINT so one that raises rolls back alone; the COMMIT is the
  costliest statement of a step. A write runs on the loop with a zero busy timeout; if another
  process holds the write lock (several processes share the file), it runs again in the
  writer thread, where waiting for the lock (30 s at most) cannot freeze the loop. A client
  never sees ``database is locked`` (at worst a 503 with Retry-After).

PostgreSQL: an asyncpg pool; ``fn`` runs through ``AsyncConnection.run_sync``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from nodeloom.settings import Settings

T = TypeVar("T")
BUSY_WAIT_MS = 30_000


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _sqlite_path(url: str) -> str:
    return url.split(":///", 1)[1]


_NOT_COUNTED = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA")


class _CountingCursor(sqlite3.Cursor):
    """Counts each statement SQLAlchemy sends (a multi-row insert once), for /metrics:
    cheaper than a SQLAlchemy cursor-execute listener, which puts every statement on
    SQLAlchemy's slower evented path (~5% of a loaded server's CPU)."""

    def execute(self, sql: str, parameters: Any = (), /) -> Self:
        self.connection.count(sql)  # type: ignore[attr-defined]
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Self:
        self.connection.count(sql)  # type: ignore[attr-defined]
        return super().executemany(sql, parameters)


def _uncounted(sql: str) -> None:
    pass


class _CountingConnection(sqlite3.Connection):
    count: Callable[[str], None] = staticmethod(_uncounted)

    def cursor(self, factory: Any = _CountingCursor) -> Any:
        return super().cursor(factory)


def _sqlite_engine(
    url: str, synchronous: str, *, writer: bool, count: Callable[[str], None]
) -> Engine:
    engine = sa.create_engine(
        "sqlite:///" + _sqlite_path(url),
        json_serializer=_json_dumps,
        json_deserializer=orjson.loads,
        # Readers are kept open: opening one costs a file open and the pragmas, and under load
        # a small pool churned through overflow connections.
        pool_size=1 if writer else 16,
        max_overflow=0 if writer else 16,
        pool_timeout=60,
        connect_args={
            "check_same_thread": False,
            "timeout": 0 if writer else 5,
            "factory": _CountingConnection,
        },
    )
    begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the sqlite3 module so BEGIN is ours.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={0 if writer else 5000}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA cache_size=-16000")
        cursor.close()
        dbapi_conn.count = count  # see _CountingCursor

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Straight to the driver: through SQLAlchemy, BEGIN cost as much as a real statement.
        try:
            conn.connection.dbapi_connection.execute(begin)
        except sqlite3.OperationalError as exc:  # as SQLAlchemy would have raised it
            raise sa.exc.OperationalError(begin, None, exc) from exc

    return engine


_PendingWrite = tuple[Callable[[Connection], Any], "asyncio.Future[Any]"]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


def _apply_group(engine: Engine, group: list[_PendingWrite], wait: bool) -> list[_Outcome]:
    """Run every function of the group in one transaction, each in its own SAVEPOINT.
    Without ``wait``, a busy database (BEGIN IMMEDIATE refused) raises for the caller to try
    again where waiting is harmless."""
    with engine.connect() as conn:
        # On the DB-API connection: through SQLAlchemy, the PRAGMA would autobegin the
        # transaction (BEGIN IMMEDIATE) with the old timeout, and fail on the lock it waits for.
        raw = conn.connection.driver_connection
        assert raw is not None
        if wait:
            raw.execute(f"PRAGMA busy_timeout={BUSY_WAIT_MS}")
        try:
            return _in_transaction(conn, group)
        finally:
            if wait:
                raw.execute("PRAGMA busy_timeout=0")


def _in_transaction(conn: Connection, group: list[_PendingWrite]) -> list[_Outcome]:
    if len(group) == 1:
        fn, future = group[0]
        try:
            with conn.begin():
                return [(future, fn(conn), None)]
        except sa.exc.OperationalError as exc:
            if _is_busy(exc):
                raise
            return [(future, None, exc)]
        except Exception as exc:
            return [(future, None, exc)]
    outcomes: list[_Outcome] = []
    with conn.begin():
        for fn, future in group:
            savepoint = conn.begin_nested()
            try:
                result = fn(conn)
            except Exception as exc:
                savepoint.rollback()
                outcomes.append((future, None, exc))
            else:
                savepoint.commit()
                outcomes.append((future, result, None))
    return outcomes


def _is_busy(exc: sa.exc.OperationalError) -> bool:
    """SQLite's 'database is locked' / 'busy': another connection holds the write lock."""
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text


class Database:
    def __init__(self, settings: Settings) -> None:
        url = settings.effective_database_url
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self._reader: Engine | None = None
        self._writer: Engine | None = None
        self._engine: AsyncEngine | None = None
        if self.is_sqlite:
            sync = settings.sqlite_synchronous
            self._reader = _sqlite_engine(url, sync, writer=False, count=self._count_sql)
            self._writer = _sqlite_engine(url, sync, writer=True, count=self._count_sql)
            self._write_lock = asyncio.Lock()
            self._pending_writes: list[_PendingWrite] = []
            self._flush_scheduled = False
            self._flushes: set[asyncio.Future[None]] = set()
            self._writer_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        else:
            self._engine = create_async_engine(
                url,
                json_serializer=_json_dumps,
                json_deserializer=orjson.loads,
                pool_size=10,
                max_overflow=10,
                pool_pre_ping=True,
            )
            event.listen(self._engine.sync_engine, "before_cursor_execute", self._count)

    # Statements sent to the database (transaction control aside), for /metrics and the
    # benchmarks; and SQLite group commits with the writes they carried.
    statements = 0
    write_groups = 0
    grouped_writes = 0

    def _count(self, *_args: Any) -> None:
        self.statements += 1

    def _count_sql(self, sql: str) -> None:
        if not sql.lstrip().upper().startswith(_NOT_COUNTED):
            self.statements += 1

    @property
    def engine(self) -> AsyncEngine | None:
        """The PostgreSQL engine (None on SQLite); for what needs an async connection of
        its own, such as streaming a copy."""
        return self._engine

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in a read transaction; its result."""
        if self._reader is not None:
            with self._reader.connect() as conn, conn.begin():
                return fn(conn)
        assert self._engine is not None
        async with self._engine.connect() as connection:
            return await connection.run_sync(fn)

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in a write transaction, committed before its result is
        returned; if it raises, none of its changes are."""
        if self._writer is None:
            assert self._engine is not None
            async with self._engine.begin() as connection:
                return await connection.run_sync(fn)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending_writes.append((fn, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._start_flush)
        result: T = await future
        return result

    def _start_flush(self) -> None:
        self._flush_scheduled = False
        group, self._pending_writes = self._pending_writes, []
        self.write_groups += 1
        self.grouped_writes += len(group)
        task = asyncio.ensure_future(self._flush(group))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, group: list[_PendingWrite]) -> None:
        assert self._writer is not None
        try:
            async with self._write_lock:
                try:
                    outcomes = _apply_group(self._writer, group, wait=False)
                except sa.exc.OperationalError as exc:
                    if not _is_busy(exc):
                        raise
                    # Another process holds the lock: wait for it in the writer thread.
                    loop = asyncio.get_running_loop()
                    outcomes = await loop.run_in_executor(
                        self._writer_thread, _apply_group, self._writer, group, True
                    )
        except BaseException as exc:
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for future, result, error in outcomes:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    async def dispose(self) -> None:
        if self._writer is not None:
            if self._flushes:
                await asyncio.gather(*self._flushes, return_exceptions=True)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._writer_thread, self._writer.dispose)
            self._writer_thread.shutdown(wait=True)
        if self._reader is not None:
            self._reader.dispose()
        if self._engine is not None:
            await self._engine.dispose()
