"""Engine and sessions.

SQLite allows one writer at a time. Concurrent write transactions from a pool would meet
``database is locked`` (or a deadlock when a deferred transaction upgrades to a write), so on
SQLite every write goes through one dedicated connection that starts ``BEGIN IMMEDIATE``, and
an asyncio lock queues writers in this process. Reads use a separate pool and never block the
writer (WAL). On PostgreSQL both paths share one pooled engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiosqlite
import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry

from nodeloom.settings import Settings

T = TypeVar("T")


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


class InlineConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls run on the event loop instead of its thread.

    An indexed read in WAL mode takes tens of microseconds and never waits for a lock, while
    each hop to aiosqlite's thread and back costs a loop wake-up and a GIL hand-over, several
    per statement. For reads the hop is the whole cost, so readers run inline. Writers keep
    the thread: BEGIN IMMEDIATE may wait for another process's lock (busy_timeout), and that
    wait must not freeze the loop.
    """

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)


def _sqlite_path(url: str) -> str:
    return url.split(":///", 1)[1]


def _sqlite_engine(url: str, synchronous: str, *, writer: bool) -> AsyncEngine:
    options: dict[str, Any] = {}
    if not writer:
        path = _sqlite_path(url)

        async def connect_inline() -> aiosqlite.Connection:
            def connector() -> sqlite3.Connection:
                return sqlite3.connect(path, check_same_thread=False, timeout=5)

            return await InlineConnection(connector, iter_chunk_size=64)

        options["async_creator"] = connect_inline
    engine = create_async_engine(
        url,
        json_serializer=_json_dumps,
        json_deserializer=orjson.loads,
        # Readers are kept open (pool_size): opening one costs a thread start and a file
        # open, and under load a small pool churned through overflow connections.
        pool_size=1 if writer else 16,
        max_overflow=0 if writer else 16,
        pool_timeout=60,
        connect_args={"check_same_thread": False, "timeout": 30},
        **options,
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the sqlite3 module so BEGIN is ours.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA cache_size=-16000")
        cursor.close()

    begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return engine


def _sqlite_sync_writer(url: str, synchronous: str, busy_timeout_ms: int) -> Engine:
    """A plain (sync) engine for the hot write path."""
    engine = sa.create_engine(
        "sqlite:///" + _sqlite_path(url),
        json_serializer=_json_dumps,
        json_deserializer=orjson.loads,
        pool_size=1,
        max_overflow=0,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


_PendingWrite = tuple[Callable[[Connection], Any], "asyncio.Future[Any]"]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


def _apply_group(engine: Engine | None, group: list[_PendingWrite]) -> list[_Outcome]:
    """Run every function of the group in one transaction, each in its own SAVEPOINT.
    A busy database (BEGIN IMMEDIATE refused) raises, for the caller to retry elsewhere."""
    assert engine is not None
    if len(group) == 1:
        fn, future = group[0]
        try:
            with engine.begin() as conn:
                return [(future, fn(conn), None)]
        except sa.exc.OperationalError as exc:
            if _is_busy(exc):
                raise
            return [(future, None, exc)]
        except Exception as exc:
            return [(future, None, exc)]
    outcomes: list[_Outcome] = []
    with engine.begin() as conn:
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
    """Owns the engines; ``read()`` and ``write()`` hand out sessions in a transaction, and
    ``run_write(fn)`` runs a sync function of a Core connection as one write transaction.

    ``run_write`` is the hot path (execute, node transitions). On SQLite the transaction
    runs right on the event loop: it is a few hundred microseconds of C work, and any hop to
    a thread costs more than that (each hop is a wake-up and a GIL hand-over, and a thread
    holding the GIL can stall the loop for the whole switch interval). It starts with
    ``BEGIN IMMEDIATE`` and a zero busy timeout, so it never waits on the loop: if another
    process holds the write lock, the same function runs again in the writer thread with the
    normal 30 s busy timeout. On PostgreSQL it runs through ``AsyncConnection.run_sync``.
    Either way the SQL is the same Core code.
    """

    def __init__(self, settings: Settings) -> None:
        url = settings.effective_database_url
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self.read_engine = _sqlite_engine(url, settings.sqlite_synchronous, writer=False)
            self.write_engine = _sqlite_engine(url, settings.sqlite_synchronous, writer=True)
            self._write_lock: asyncio.Lock | None = asyncio.Lock()
            self._sync_writer: Engine | None = _sqlite_sync_writer(
                url, settings.sqlite_synchronous, busy_timeout_ms=30_000
            )
            self._inline_writer: Engine | None = _sqlite_sync_writer(
                url, settings.sqlite_synchronous, busy_timeout_ms=0
            )
            self._pending_writes: list[_PendingWrite] = []
            self._flush_scheduled = False
            self._flushes: set[asyncio.Future[None]] = set()
            self._writer_thread: ThreadPoolExecutor | None = ThreadPoolExecutor(
                1, thread_name_prefix="sqlite-writer"
            )
        else:
            engine = create_async_engine(
                url,
                json_serializer=_json_dumps,
                json_deserializer=orjson.loads,
                pool_size=10,
                max_overflow=10,
                pool_pre_ping=True,
            )
            self.read_engine = self.write_engine = engine
            self._write_lock = None
            self._sync_writer = None
            self._inline_writer = None
            self._writer_thread = None
        # Round trips to the database, for /metrics and the benchmarks.
        self.statements = 0
        self.write_groups = 0  # SQLite group commits, and the writes they carried
        self.grouped_writes = 0
        for engine in {self.read_engine, self.write_engine}:
            event.listen(engine.sync_engine, "before_cursor_execute", self._count)
        for sync_engine in (self._sync_writer, self._inline_writer):
            if sync_engine is not None:
                event.listen(sync_engine, "before_cursor_execute", self._count)
        self._read_sessions = async_sessionmaker(self.read_engine, expire_on_commit=False)
        self._write_sessions = async_sessionmaker(self.write_engine, expire_on_commit=False)

    def _count(self, *_args: Any) -> None:
        self.statements += 1

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        async with self._read_sessions() as session, session.begin():
            yield session

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction, committed when the block exits without an exception."""
        lock = self._write_lock
        if lock is None:
            async with self._write_sessions() as session, session.begin():
                yield session
            return
        async with lock, self._write_sessions() as session, session.begin():
            yield session

    @contextlib.asynccontextmanager
    async def read_core(self) -> AsyncIterator[AsyncConnection]:
        """A Core connection in a read transaction: no ORM, for hot read paths."""
        async with self.read_engine.connect() as conn, conn.begin():
            yield conn

    async def run_write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` in a write transaction; its changes are committed (and
        only then is the result returned) unless it raises, in which case none are.

        On SQLite, calls made in the same loop iteration are committed together (group
        commit): each runs inside its own SAVEPOINT, so one that raises is rolled back alone,
        and all of them share one COMMIT — the single most expensive statement of a step.
        """
        if self._sync_writer is None or self._writer_thread is None:
            async with self.write_engine.begin() as conn:
                return await conn.run_sync(fn)
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
        assert self._write_lock is not None and self._inline_writer is not None
        try:
            async with self._write_lock:
                try:
                    outcomes = _apply_group(self._inline_writer, group)
                except sa.exc.OperationalError as exc:
                    if not _is_busy(exc):
                        raise
                    # Another process holds the lock: wait for it in the writer thread.
                    loop = asyncio.get_running_loop()
                    outcomes = await loop.run_in_executor(
                        self._writer_thread, _apply_group, self._sync_writer, group
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
        if self._sync_writer is not None and self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        if self._inline_writer is not None:
            self._inline_writer.dispose()
        if self._writer_thread is not None and self._sync_writer is not None:
            await asyncio.get_running_loop().run_in_executor(
                self._writer_thread, self._sync_writer.dispose
            )
            self._writer_thread.shutdown(wait=True)
        await self.read_engine.dispose()
        if self.write_engine is not self.read_engine:
            await self.write_engine.dispose()
