"""The one way to reach the database: ``await db.read(fn)`` and ``await db.write(fn)``, where
``fn`` is a plain function of a SQLAlchemy Core ``Connection`` (the store modules and the
engine's steps are such functions, one module per aggregate). The same code runs on SQLite and
PostgreSQL; only how it is run differs.

SQLite (one file, one writer at a time):

- Each process has one connection, kept open, and uses it on the event loop only: reads in a
  deferred transaction (WAL: a read never waits for a writer, and an indexed read takes
  microseconds, less than any hop to a thread would cost), writes in ``BEGIN IMMEDIATE``
  transactions, one at a time. Neither awaits inside its transaction, so they never
  interleave, and the page cache holds what the process just wrote (a separate reading
  connection re-read those pages after every commit).
- Writes submitted in the same loop iteration share one transaction (group
  commit), each in its own SAVEPOINT so one that raises rolls back alone; the COMMIT is the
  costliest statement of a step. A write runs on the loop with a zero busy timeout. If another
  process holds the write lock (several processes share the file), the group waits on the loop
  — a short, growing sleep between attempts, 30 s at most — and writes submitted meanwhile
  join it. The transaction itself always runs on the loop: run in a thread, it competed with
  the loop for the GIL while holding the lock the other process waited for. A client never
  sees ``database is locked`` (at worst a 503 with Retry-After).
- Checkpoints (copying the WAL back into the database file, with an fsync) run in a thread
  every ``CHECKPOINT_SECONDS`` once the server started them (``start``), not in whichever
  commit crossed SQLite's automatic threshold, where they held the loop for milliseconds.
  Often, so that each fsync is small: a large one stalled the disk for everyone. The log
  is also made to start over now and then (``_checkpoint``), or it grows without end.

PostgreSQL: an asyncpg pool; ``fn`` runs through ``AsyncConnection.run_sync``. Every
exchange with the server is a network round trip, so none is spent that the work does not
need (issue #20: a webhook trigger cost ~23 of them):

- SQLAlchemy's asyncpg adapter is kept out of transaction control (its connections are in
  its ``AUTOCOMMIT`` mode) and ``write`` runs asyncpg's own transaction: BEGIN, ``fn``'s
  statements, COMMIT. A ``read`` runs its statements without a transaction at all: at READ
  COMMITTED, PostgreSQL's default and ours, every statement of a transaction takes its own
  snapshot anyway, so BEGIN and ROLLBACK around a read bought nothing but two round trips.
- A connection taken from the pool is not pinged (``pool_pre_ping`` cost BEGIN, a ping and
  ROLLBACK: three round trips per checkout). One the server or the network closed is seen
  as closed by asyncpg and replaced at once; one that sat unused for ``IDLE_PING_SECONDS``
  (a quiet server, where a restarted database may have left it half open) is pinged first.
  One whose goodbye from the server is still on its way fails at its first round trip; a
  read, or a write whose BEGIN failed so, is tried again on another connection
  (``STALE_TRIES``), so the client of a restarted database sees no error.
- The hot statements run prepared on the asyncpg connection (``db/prepared.py``), where
  asyncpg's own per-connection cache keeps them prepared.
"""

from __future__ import annotations

import _sqlite3
import asyncio
import contextlib
import contextvars
import ctypes
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar, cast

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection, QueuePool
from sqlalchemy.util import greenlet_spawn

from nodeloom.db.busy import BusyWait, is_busy
from nodeloom.db.prepared import STATEMENT_COUNTER, Params, Prepared, Rows, translated
from nodeloom.settings import Settings

log = logging.getLogger("nodeloom.db")
T = TypeVar("T")
BUSY_WAIT_SECONDS = 30.0
CHECKPOINT_SECONDS = 0.25
# 64 MB of 4 KB pages: restarts every few seconds under the heaviest load measured, rarely
# otherwise; the file stays about that size.
WAL_RESTART_FRAMES = 16_384
RESTART_WAIT_SECONDS = 0.05
CONNECT_WAIT_MS = 10_000
# A pooled PostgreSQL connection unused for longer is pinged before it is used again.
IDLE_PING_SECONDS = 10.0
_USED_AT = "nodeloom.used_at"
# How many connections a read, or a write's BEGIN, is tried on when each in turn turns out
# closed by the server (``_closed_under``): the pool's connections all went at once.
STALE_TRIES = 3


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _sqlite_path(url: str) -> str:
    return url.split(":///", 1)[1]


_NOT_COUNTED = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA")


class StatementCount:
    """Statements sent on behalf of one piece of work (``Database.counting``)."""

    n = 0


# The counts open in this task (and the tasks it starts, which copy its context); the
# process-wide ``Database.statements`` also counts every background loop's statements.
_COUNTS: contextvars.ContextVar[tuple[StatementCount, ...]] = contextvars.ContextVar(
    "statement_counts", default=()
)


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


def _sqlite_engine(url: str, synchronous: str, count: Callable[[str], None]) -> Engine:
    """One connection (reads and writes of this process, all on the event loop)."""
    engine = sa.create_engine(
        "sqlite:///" + _sqlite_path(url),
        json_serializer=_json_dumps,
        json_deserializer=orjson.loads,
        pool_size=1,
        max_overflow=0,
        pool_timeout=60,
        connect_args={"check_same_thread": False, "timeout": 0, "factory": _CountingConnection},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the sqlite3 module so BEGIN is ours.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        # The migration left the file in WAL mode (db/migrate.py), so this only reads the
        # mode, and may wait for a lock a sibling process holds for a moment (starting up,
        # checkpointing): once per process, before it serves. From then on nothing waits
        # inside SQLite (db.busy).
        cursor.execute(f"PRAGMA busy_timeout={CONNECT_WAIT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA cache_size=-16000")
        # Savepoints (one per write of a group commit) keep the pages they change in a
        # statement journal: a temporary file per transaction on disk (created, written,
        # deleted: ~60 KB and three file operations a commit), in memory here.
        cursor.execute("PRAGMA temp_store=MEMORY")
        cursor.close()
        dbapi_conn.count = count  # see _CountingCursor

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Straight to the driver: through SQLAlchemy, BEGIN cost as much as a real statement.
        # Writes take the write lock at once (IMMEDIATE); reads never do.
        begin = conn.info.get(_BEGIN, _WRITE)
        try:
            conn.connection.dbapi_connection.execute(begin)
        except sqlite3.OperationalError as exc:  # as SQLAlchemy would have raised it
            raise sa.exc.OperationalError(begin, None, exc) from exc

    return engine


_BEGIN = "nodeloom.begin"
_WRITE = "BEGIN IMMEDIATE"
_READ = "BEGIN"


_PendingWrite = tuple[Callable[[Connection], Any], "asyncio.Future[Any]"]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


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
        # Savepoints straight on the driver: through SQLAlchemy each one was a statement
        # compiled anew (SAVEPOINT and RELEASE cost as much as the write they wrapped).
        raw = conn.connection.driver_connection
        assert raw is not None
        for fn, future in group:
            raw.execute("SAVEPOINT grouped")
            try:
                result = fn(conn)
            except Exception as exc:
                raw.execute("ROLLBACK TO grouped")
                raw.execute("RELEASE grouped")
                outcomes.append((future, None, exc))
            else:
                raw.execute("RELEASE grouped")
                outcomes.append((future, result, None))
    return outcomes


def _is_busy(exc: sa.exc.OperationalError) -> bool:
    """SQLite's 'database is locked' / 'busy': another connection holds the write lock."""
    return is_busy(str(exc.orig))


def _memory_used() -> Callable[[], int] | None:
    """``sqlite3_memory_used`` of the library the sqlite3 module uses (loaded already, so
    the same counters), or None where it is not exported."""
    try:
        fn = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int64
    fn.argtypes = []
    return cast(Callable[[], int], fn)


_MEMORY_USED = _memory_used()


class Database:
    def __init__(self, settings: Settings) -> None:
        url = settings.effective_database_url
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self._writer: Engine | None = None
        self._engine: AsyncEngine | None = None
        self._pg: AsyncEngine | None = None
        if self.is_sqlite:
            self._writer = _sqlite_engine(url, settings.sqlite_synchronous, self._count_sql)
            self._write_conn: Connection | None = None
            self._write_lock = asyncio.Lock()
            self._pending_writes: list[_PendingWrite] = []
            self._flush_scheduled = False
            self._flushes: set[asyncio.Future[None]] = set()
            self._checkpoints: asyncio.Task[None] | None = None
            self._checkpoint_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-checkpoint")
            self._writes_since_checkpoint = 0
        else:
            self._engine = create_async_engine(
                url,
                json_serializer=_json_dumps,
                json_deserializer=orjson.loads,
                # 20 connections at most, all kept: with 10 kept and 10 more on demand, a
                # burst of requests opened and closed connections all along (32 connects
                # for 200 provider runs accepted, each a handshake here and a new backend
                # with cold caches there, its prepared statements parsed again: issue #36).
                pool_size=20,
                max_overflow=0,
            )
            sync_engine = self._engine.sync_engine
            event.listen(sync_engine, "before_cursor_execute", self._count)
            event.listen(sync_engine, "connect", self._on_pg_connect)
            event.listen(sync_engine, "checkout", _alive_on_checkout)
            event.listen(sync_engine, "checkin", _used_on_checkin)
            # The same pool, its connections in the adapter's autocommit mode: ``read`` and
            # ``write`` decide what is a transaction (see the module docstring).
            self._pg = self._engine.execution_options(isolation_level="AUTOCOMMIT")

    # Statements sent to the database (transaction control aside), for /metrics and the
    # benchmarks; and SQLite group commits with the writes they carried.
    statements = 0
    write_groups = 0
    grouped_writes = 0

    def _count(self, *_args: Any) -> None:
        self.statements += 1
        for count in _COUNTS.get():
            count.n += 1

    @staticmethod
    @contextlib.contextmanager
    def counting() -> Iterator[StatementCount]:
        """Count the statements this task (and the tasks it starts) sends meanwhile, apart
        from any background loop's. On PostgreSQL each request's statements run in its
        own task; on SQLite a group commit runs the writes of several tasks from the loop,
        outside any of them, so only reads are counted there."""
        count = StatementCount()
        token = _COUNTS.set((*_COUNTS.get(), count))
        try:
            yield count
        finally:
            _COUNTS.reset(token)

    def _on_pg_connect(self, _dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
        record.info[STATEMENT_COUNTER] = self._count  # statements run prepared count too
        record.info[_USED_AT] = time.monotonic()

    def _count_sql(self, sql: str) -> None:
        if not sql.lstrip().upper().startswith(_NOT_COUNTED):
            self._count()

    @property
    def sqlite_memory_bytes(self) -> int | None:
        """The memory SQLite holds in this process (page caches, prepared statements), by
        its own count; None on PostgreSQL or where the library does not say."""
        if self._writer is None or _MEMORY_USED is None:
            return None
        return int(_MEMORY_USED())

    @property
    def engine(self) -> AsyncEngine | None:
        """The PostgreSQL engine (None on SQLite); for what needs an async connection of
        its own, such as streaming a copy."""
        return self._engine

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in a read transaction; its result."""
        if self._writer is not None:
            # The writer's connection: its page cache holds what this process just wrote
            # (a second connection re-read those pages after every commit). Nothing else
            # uses it meanwhile: a write group runs without awaiting, like this read.
            wait = BusyWait(BUSY_WAIT_SECONDS)
            while True:
                conn = self._connection()
                conn.info[_BEGIN] = _READ
                try:
                    with conn.begin():
                        return fn(conn)
                except sa.exc.OperationalError as exc:
                    # Rare in WAL mode (another process recovering the log): wait, as writes do.
                    if not _is_busy(exc) or wait.expired:
                        raise
                finally:
                    conn.info[_BEGIN] = _WRITE
                await wait.pause()
        assert self._pg is not None
        for attempt in range(1, STALE_TRIES + 1):
            async with self._pg.connect() as connection:
                try:
                    return await connection.run_sync(fn)
                except sa.exc.DBAPIError as exc:
                    # A read changes nothing, so it may run again on another connection.
                    if attempt == STALE_TRIES or not await _closed_under(connection, exc):
                        raise
        raise AssertionError("unreachable")

    async def fetch(self, statement: Prepared, params: Params) -> Rows:
        """One prepared SELECT (no IN list), as ``read`` runs it; on PostgreSQL straight on a
        connection from the pool: ``read``'s ``AsyncConnection`` costs about 0.1 ms of CPU
        around a statement whose round trip costs a fifth of that, and every execute starts
        with such look-ups (its API key, its Idempotency-Key: issue #36)."""
        if self._engine is None:
            return cast(Rows, await self.read(lambda c: statement.run(c, params)))
        # Every pooled connection may have been ended at once (a restart of the server), and
        # each is found out only when a statement is sent on it: try as many as the pool holds.
        tries = cast(QueuePool, self._engine.pool).size() + 1
        for attempt in range(1, tries + 1):
            pooled = await self._checkout()
            try:
                return await statement.fetch_asyncpg(pooled, self._engine.dialect, params)
            except sa.exc.DBAPIError as exc:
                # A read changes nothing, so it may run again on another connection.
                if attempt == tries or not _gone_under(pooled, exc):
                    raise
            finally:
                pooled.close()
        raise AssertionError("unreachable")

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in a write transaction, committed before its result is
        returned; if it raises, none of its changes are."""
        if self._writer is None:
            assert self._pg is not None
            for attempt in range(1, STALE_TRIES + 1):
                async with self._pg.connect() as connection:
                    pooled = await connection.get_raw_connection()
                    raw = pooled.driver_connection
                    assert raw is not None
                    transaction = raw.transaction()
                    try:
                        await transaction.start()
                    except Exception as exc:
                        # Nothing but BEGIN was sent, so the write may start on another
                        # connection.
                        if attempt < STALE_TRIES and await _closed_under(connection, exc):
                            continue
                        raise translated(pooled, "BEGIN", exc) from exc
                    return await _in_pg_transaction(connection, pooled, transaction, fn)
            raise AssertionError("unreachable")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending_writes.append((fn, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._start_flush)
        result: T = await future
        return result

    async def fetch_row_alone(self, sql: str, *args: Any) -> Any:
        """One PostgreSQL statement outside any transaction (it commits on its own), straight
        on asyncpg: its first row (an asyncpg Record), or None. For another library's hot
        statement on our pool, such as Procrastinate's job fetch (db/procrastinate_queue.py),
        without that library's own connector in the way."""
        assert self._engine is not None, "PostgreSQL only"
        pooled = await self._checkout()
        try:
            raw = pooled.driver_connection
            assert raw is not None
            self._count()
            try:
                return await raw.fetchrow(sql, *args)
            except Exception as exc:  # a closed connection is replaced at its next checkout
                raise translated(pooled, sql, exc) from exc
        finally:
            pooled.close()

    async def _checkout(self) -> PoolProxiedConnection:
        """A connection straight from the pool, for statements sent on asyncpg itself (the
        caller checks it in): an ``AsyncConnection`` around the checkout (its greenlets,
        the autocommit characteristic set and reset again) cost about 0.1 ms of CPU, more
        than a statement's own round trip; outside a transaction asyncpg commits each
        statement on its own (issue #36)."""
        assert self._engine is not None
        pooled: PoolProxiedConnection = await greenlet_spawn(self._engine.sync_engine.pool.connect)
        return pooled

    def _start_flush(self) -> None:
        self._flush_scheduled = False
        if self._write_lock.locked():
            return  # the flush in progress takes these writes when it is done
        task = asyncio.ensure_future(self._flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self) -> None:
        async with self._write_lock:
            while self._pending_writes:
                group, self._pending_writes = self._pending_writes, []
                await self._flush_group(group)

    async def _flush_group(self, group: list[_PendingWrite]) -> None:
        try:
            outcomes = await self._apply(group)
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

    async def _apply(self, group: list[_PendingWrite]) -> list[_Outcome]:
        """The group in one transaction; while another process holds the write lock, wait
        for it here (writes submitted meanwhile join the group)."""
        assert self._writer is not None
        wait = BusyWait(BUSY_WAIT_SECONDS)
        while True:
            try:
                outcomes = _in_transaction(self._connection(), group)
            except sa.exc.OperationalError as exc:
                if not _is_busy(exc) or wait.expired:
                    raise
                await wait.pause()
                group += self._pending_writes
                self._pending_writes = []
                continue
            self.write_groups += 1
            self.grouped_writes += len(group)
            self._writes_since_checkpoint += len(group)
            return outcomes

    def _connection(self) -> Connection:
        assert self._writer is not None
        conn = self._write_conn
        if conn is None or conn.closed:
            conn = self._write_conn = self._writer.connect()
        return conn

    def start(self) -> None:
        """Checkpoint in the background from now on (a server; one-off commands leave it to
        SQLite's automatic checkpoints)."""
        if self._writer is None or self._checkpoints is not None:
            return
        driver = self._connection().connection.driver_connection
        assert driver is not None
        driver.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpoints = asyncio.create_task(self._checkpoint_forever(), name="checkpoints")

    async def _checkpoint_forever(self) -> None:
        assert self._writer is not None
        path = _sqlite_path(self.url)
        loop = asyncio.get_running_loop()
        connection: sqlite3.Connection | None = None
        try:
            connection = await loop.run_in_executor(
                self._checkpoint_thread,
                lambda: sqlite3.connect(
                    path, timeout=RESTART_WAIT_SECONDS, check_same_thread=False
                ),
            )
            while True:
                await asyncio.sleep(CHECKPOINT_SECONDS)
                if self._writes_since_checkpoint == 0:
                    continue
                self._writes_since_checkpoint = 0
                try:
                    await loop.run_in_executor(self._checkpoint_thread, _checkpoint, connection)
                except sqlite3.Error:
                    log.warning("checkpoint failed; retrying later", exc_info=True)
        finally:
            if connection is not None:
                self._checkpoint_thread.submit(connection.close)

    async def dispose(self) -> None:
        if self._writer is not None:
            if self._checkpoints is not None:
                self._checkpoints.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._checkpoints
            if self._flushes:
                await asyncio.gather(*self._flushes, return_exceptions=True)
            if self._write_conn is not None:
                self._write_conn.close()
            if self._checkpoints is not None:
                # The last checkpoint, so a clean stop leaves no WAL to replay.
                await asyncio.get_running_loop().run_in_executor(
                    self._checkpoint_thread, _final_checkpoint, _sqlite_path(self.url)
                )
            self._checkpoint_thread.shutdown(wait=True)
            self._writer.dispose()
        if self._engine is not None:
            await self._engine.dispose()


async def _closed_under(connection: AsyncConnection, error: BaseException) -> bool:
    """Whether ``error`` came from a connection the server had already closed: after a
    restart of PostgreSQL, or a proxy ending idle connections, the server's goodbye may still
    be on its way when a pooled connection is taken, and the first statement on it fails
    (``ConnectionDoesNotExistError``, or asyncpg's "cannot switch to state" when the goodbye
    arrives mid-statement). Such a connection is gone after the failure; the pool replaces
    it at its next checkout."""
    if getattr(error, "connection_invalidated", False):
        return True
    try:
        pooled = await connection.get_raw_connection()
    except sa.exc.SQLAlchemyError:
        return True  # invalidated meanwhile
    raw = pooled.driver_connection
    return raw is None or bool(raw.is_closed())


def _gone_under(pooled: PoolProxiedConnection, error: sa.exc.DBAPIError) -> bool:
    """``_closed_under`` for a statement sent on asyncpg itself, decided at once: the server's
    goodbye (a restart, an administrator ending the connection) may have arrived without
    asyncpg having seen the socket close yet, and the statement then fails with "cannot switch
    to state" or the goodbye's own error. Such a connection is invalidated, so that the pool
    does not hand it to the next caller."""
    import asyncpg  # only on PostgreSQL; an embedded server never loads it

    raw = pooled.driver_connection
    cause = error.orig.__cause__ if error.orig is not None else None
    gone = (
        raw is None
        or bool(raw.is_closed())
        or isinstance(
            cause,
            asyncpg.InternalClientError
            | asyncpg.InterfaceError
            | asyncpg.PostgresConnectionError
            | asyncpg.exceptions.AdminShutdownError
            | asyncpg.exceptions.CrashShutdownError,
        )
    )
    if gone:
        pooled.invalidate(error)
    return gone


async def _in_pg_transaction(
    connection: AsyncConnection,
    pooled: PoolProxiedConnection,
    transaction: Any,
    fn: Callable[[Connection], T],
) -> T:
    """``fn`` in asyncpg's ``transaction``, begun on ``connection`` (the adapter, in autocommit
    mode, sends no BEGIN or COMMIT of its own); an error of COMMIT as SQLAlchemy raises it,
    as ``fn``'s own are."""
    try:
        result = await connection.run_sync(fn)
    except BaseException:
        await _roll_back(connection, pooled, transaction)
        raise
    try:
        await transaction.commit()
    except Exception as exc:
        await _roll_back(connection, pooled, transaction)
        raise translated(pooled, "COMMIT", exc) from exc
    return result


async def _roll_back(connection: AsyncConnection, pooled: PoolProxiedConnection, tx: Any) -> None:
    """Roll back, or, when that fails (the connection is gone), drop the connection so the
    pool never hands out one left inside a transaction."""
    if pooled.driver_connection is None or pooled.driver_connection.is_closed():
        await connection.invalidate()
        return
    try:
        await tx.rollback()
    except Exception:
        log.warning("rollback failed; the connection is dropped", exc_info=True)
        await connection.invalidate()


def _alive_on_checkout(dbapi_conn: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
    """A connection asyncpg knows is closed is replaced without a round trip; one unused
    for ``IDLE_PING_SECONDS`` is pinged first. Raising DisconnectionError makes the pool
    drop it and connect anew (SQLAlchemy's "pessimistic" disconnect handling)."""
    if dbapi_conn.driver_connection.is_closed():
        raise sa.exc.DisconnectionError("the connection was closed")
    used_at = record.info.get(_USED_AT)
    if used_at is None or time.monotonic() - used_at > IDLE_PING_SECONDS:
        try:
            dbapi_conn.ping()
        except Exception as exc:
            raise sa.exc.DisconnectionError(f"ping failed: {exc}") from exc


def _used_on_checkin(_dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
    record.info[_USED_AT] = time.monotonic()


def _checkpoint(connection: sqlite3.Connection) -> None:
    """Copy committed WAL frames into the database file without waiting for anyone
    (PASSIVE: what readers still use stays in the WAL for the next round).

    The WAL starts again from its beginning only when a write begins while every frame is
    copied and nobody reads from it; with reads and writes always under way that moment never
    comes, and the log grew by the megabytes of every second (886 MB in five minutes of
    load). So once it holds ``WAL_RESTART_FRAMES`` a RESTART follows: it waits a moment
    (``RESTART_WAIT_SECONDS``) for the writer's lock and the readers, holding off new
    writes (which wait on their loops), and has the next write start the log again; if it
    cannot in that time it does what PASSIVE would and tries again next round. Right after
    the PASSIVE round (the bulk of the copying and its fsync, blocking nobody), it holds
    writes off for milliseconds; the file keeps its size and is written over."""
    ((_, frames, _),) = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    if frames >= WAL_RESTART_FRAMES:
        connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()


def _final_checkpoint(path: str) -> None:
    with contextlib.closing(sqlite3.connect(path, timeout=1)) as connection:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
