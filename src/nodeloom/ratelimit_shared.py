"""Moving-window rate limits shared by the processes of one ``nodeloom serve --processes N``
without Redis: the windows live in a small SQLite file of their own next to the database.

Each decision is one short ``BEGIN IMMEDIATE`` transaction on that file (prune the key's
expired hits, count, maybe insert), so two processes counting the same key are serialised
by SQLite's lock and a limit of 100 a minute stays 100 whichever process answers. The file
is scratch: ``synchronous=OFF`` (a crash may lose the last hits, which only makes a window
more lenient for a minute) and nothing in it is ever read by anything else. It is separate
from the main database so that counting never waits behind a run's commit.

Same semantics as ``LocalWindows`` (the single-process default): a request is allowed while
fewer than ``limit`` were counted in the last ``window`` seconds; ``reset`` is when the
oldest counted one leaves the window.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import threading
import time
from pathlib import Path

from nodeloom.errors import ServiceUnavailable
from nodeloom.ratelimit import Decision

# Hits older than any window we use are swept now and then, whatever their key.
LONGEST_WINDOW_SECONDS = 3600
_SWEEP_EVERY = 5_000


class SharedWindows:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: the transactions below are ours. A lock held by another process
        # is waited for at most 2 s; they hold it for microseconds.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("PRAGMA busy_timeout=2000")
        self._db.execute("CREATE TABLE IF NOT EXISTS hits (key TEXT NOT NULL, at REAL NOT NULL)")
        self._db.execute("CREATE INDEX IF NOT EXISTS hits_key_at ON hits (key, at)")
        # One connection, used from the event loop and, rarely, a thread.
        self._mutex = threading.Lock()
        self._ops = 0

    def decide(self, key: str, limit: int, window: int, *, count: bool) -> Decision:
        return self._decide(key, limit, window, count=count)[0]

    def take(self, key: str, limit: int, window: int) -> tuple[Decision, int | None]:
        """Count one request now; the stamp lets ``give_back`` undo exactly this one."""
        return self._decide(key, limit, window, count=True)

    def give_back(self, key: str, stamp: int) -> None:
        with self._mutex:
            self._db.execute("DELETE FROM hits WHERE rowid = ? AND key = ?", (stamp, key))

    def clear(self, key: str) -> None:
        with self._mutex:
            self._db.execute("DELETE FROM hits WHERE key = ?", (key,))

    def _decide(
        self, key: str, limit: int, window: int, *, count: bool
    ) -> tuple[Decision, int | None]:
        now = time.time()
        with self._mutex:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                self._sweep(now)
                db.execute("DELETE FROM hits WHERE key = ? AND at <= ?", (key, now - window))
                counted, oldest = db.execute(
                    "SELECT count(*), min(at) FROM hits WHERE key = ?", (key,)
                ).fetchone()
                allowed = counted < limit
                stamp = None
                if allowed and count:
                    stamp = db.execute(
                        "INSERT INTO hits (key, at) VALUES (?, ?)", (key, now)
                    ).lastrowid
                    counted += 1
                    oldest = now if oldest is None else oldest
                db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise ServiceUnavailable(
                    "Rate limits cannot be checked right now; retry shortly.",
                    headers={"Retry-After": "1"},
                ) from exc
            except BaseException:
                db.execute("ROLLBACK")
                raise
        remaining = max(0, limit - counted)
        reset = min(window, math.ceil(oldest + window - now)) if oldest is not None else 0
        return Decision(allowed, limit, remaining, max(0, reset)), stamp

    def _sweep(self, now: float) -> None:
        self._ops += 1
        if self._ops % _SWEEP_EVERY == 0:
            self._db.execute("DELETE FROM hits WHERE at <= ?", (now - LONGEST_WINDOW_SECONDS,))

    def close(self) -> None:
        with self._mutex:
            self._db.close()
