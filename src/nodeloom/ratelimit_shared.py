"""Moving-window rate limits shared by the processes of one ``nodeloom serve --processes N``
without Redis: the windows live in a small SQLite file of their own next to the database.

Per key the file holds the times of the counted requests (``hits``) and how many of them
there are (``counts``), so a decision costs the same whatever the limit: delete the key's
hits that left the window (each hit is deleted once), read the count and the oldest hit,
maybe insert one. Counting is one short ``BEGIN IMMEDIATE`` transaction, so two processes
counting the same key are serialised by SQLite's lock and a limit of 100 a minute stays 100
whichever process answers; a check that counts nothing reads without the lock.

The lock is never waited for inside SQLite (its busy handler sleeps in the calling thread,
which here is the event loop): a busy file is tried again after a short ``asyncio.sleep``
(``db.busy``, as the main database's connection does).

The file is scratch: ``synchronous=OFF`` (a crash may lose the last hits, which only makes a
window more lenient for a minute) and nothing in it is ever read by anything else. It is
separate from the main database so that counting never waits behind a run's commit.

Same semantics as the other ``Windows`` stores (ratelimit.py): a request is allowed while
fewer than ``limit`` were counted in the last ``window`` seconds; ``reset`` is when the
oldest counted one leaves the window.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from nodeloom.db.busy import BusyWait, is_busy
from nodeloom.errors import ServiceUnavailable
from nodeloom.ratelimit import Decision

T = TypeVar("T")
SCHEMA_VERSION = 2
# Keys with no hit for this long are forgotten now and then.
LONGEST_WINDOW_SECONDS = 3600
_SWEEP_EVERY = 5_000
BUSY_WAIT_SECONDS = 2.0

_SCHEMA = (
    "DROP TABLE IF EXISTS hits",
    "DROP TABLE IF EXISTS counts",
    "CREATE TABLE hits (key TEXT NOT NULL, at REAL NOT NULL)",
    "CREATE INDEX hits_key_at ON hits (key, at)",
    "CREATE TABLE counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)


class _Busy(Exception):
    """Another process holds the file's write lock."""


def windows_file(data_dir: Path) -> Path:
    """The file of the windows, next to the database."""
    return data_dir / "limits.sqlite3"


def _open(path: Path) -> sqlite3.Connection:
    """The file, in WAL mode and with the current schema."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Autocommit mode: the transactions below are ours. No busy timeout once set up: a
    # locked file is waited for with asyncio.sleep (see the module docstring).
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA busy_timeout=2000")  # set-up only
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("BEGIN IMMEDIATE")
    try:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            for statement in _SCHEMA:
                db.execute(statement)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("PRAGMA busy_timeout=0")
    return db


def prepare(path: Path) -> None:
    """Set the file up before the processes that share it start (``serve --processes N``'s
    supervisor, as it migrates the database). Two processes switching a new file to WAL at
    once can deadlock, and SQLite then fails one of them at once, without the busy
    timeout: one child in two died at start that way when two opened a new file together.
    On a file already in WAL mode with its schema, each process's set-up only reads."""
    _open(path).close()


class SharedWindows:
    def __init__(self, path: Path) -> None:
        self._db = _open(path)
        # One connection, used from the event loop; a mutex in case a thread ever does.
        self._mutex = threading.Lock()
        self._ops = 0

    async def decide(self, key: str, limit: int, window: int, *, count: bool) -> Decision:
        if not count:
            return self._peek(key, limit, window)
        return (await self.take(key, limit, window))[0]

    async def take(self, key: str, limit: int, window: int) -> tuple[Decision, int | None]:
        """Count one request now; the stamp lets ``give_back`` undo exactly this one."""
        return await self._locked(lambda: self._count(key, limit, window))

    async def give_back(self, key: str, stamp: int) -> None:
        def give_back() -> None:
            gone = self._db.execute("DELETE FROM hits WHERE rowid = ? AND key = ?", (stamp, key))
            if gone.rowcount:
                self._db.execute("UPDATE counts SET n = n - 1 WHERE key = ?", (key,))

        await self._locked(give_back)

    def _peek(self, key: str, limit: int, window: int) -> Decision:
        """Would one more be allowed? A read: no lock, never busy (WAL)."""
        now = time.time()
        edge = now - window
        with self._mutex:
            n, expired, oldest = self._db.execute(
                "SELECT (SELECT n FROM counts WHERE key = ?),"
                " (SELECT count(*) FROM hits WHERE key = ? AND at <= ?),"
                " (SELECT min(at) FROM hits WHERE key = ? AND at > ?)",
                (key, key, edge, key, edge),
            ).fetchone()
        counted = (n or 0) - expired
        return Decision.of(counted < limit, limit, counted, oldest, window, now)

    def _count(self, key: str, limit: int, window: int) -> tuple[Decision, int | None]:
        now = time.time()
        db = self._db
        self._sweep(now)
        expired = db.execute(
            "DELETE FROM hits WHERE key = ? AND at <= ?", (key, now - window)
        ).rowcount
        row = db.execute("SELECT n FROM counts WHERE key = ?", (key,)).fetchone()
        counted = (row[0] if row else 0) - expired
        allowed = counted < limit
        stamp = None
        if allowed:
            stamp = db.execute("INSERT INTO hits (key, at) VALUES (?, ?)", (key, now)).lastrowid
            counted += 1
        if allowed or expired:
            db.execute(
                "INSERT INTO counts (key, n) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET n = excluded.n",
                (key, counted),
            )
        (oldest,) = db.execute("SELECT min(at) FROM hits WHERE key = ?", (key,)).fetchone()
        return Decision.of(allowed, limit, counted, oldest, window, now), stamp

    async def _locked(self, work: Callable[[], T]) -> T:
        """``work`` in one write transaction; while another process holds the file, try
        again after a short sleep (2 s at most, then 503)."""
        wait = BusyWait(BUSY_WAIT_SECONDS)
        while True:
            try:
                return self._transaction(work)
            except _Busy:
                if wait.expired:
                    raise ServiceUnavailable(
                        "Rate limits cannot be checked right now; retry shortly.",
                        headers={"Retry-After": "1"},
                    ) from None
                await wait.pause()

    def _transaction(self, work: Callable[[], T]) -> T:
        with self._mutex:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if is_busy(str(exc)):
                    raise _Busy from exc
                raise
            try:
                result = work()
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            return result

    def _sweep(self, now: float) -> None:
        """Forget keys with no hit in the longest window (a key still in use deletes its own
        old hits whenever it is counted)."""
        self._ops += 1
        if self._ops % _SWEEP_EVERY == 0:
            stale = (now - LONGEST_WINDOW_SECONDS,)
            self._db.execute(
                "DELETE FROM counts WHERE key IN"
                " (SELECT key FROM hits GROUP BY key HAVING max(at) <= ?)",
                stale,
            )
            self._db.execute("DELETE FROM counts WHERE n <= 0")
            self._db.execute("DELETE FROM hits WHERE key NOT IN (SELECT key FROM counts)")

    async def close(self) -> None:
        with self._mutex:
            self._db.close()
