"""Waiting for another process's SQLite lock without holding the event loop.

SQLite's own busy handler sleeps in the calling thread, which here is the event loop: every
user of a shared file therefore runs with no busy timeout, and on "database is locked" tries
again after an ``asyncio.sleep`` — short at first (the lock is usually held for a commit,
well under a millisecond), growing to 1 ms, until a deadline.
"""

from __future__ import annotations

import asyncio
import time

FIRST_PAUSE = 0.0002
LONGEST_PAUSE = 0.001


def is_busy(message: str) -> bool:
    """Is this SQLite error "database is locked" / "busy" (another connection holds the
    lock), rather than a real failure?"""
    text = message.lower()
    return "locked" in text or "busy" in text


class BusyWait:
    """One wait for a lock: ``pause`` between attempts, give up once ``expired``."""

    def __init__(self, seconds: float) -> None:
        self._deadline = time.monotonic() + seconds
        self._pause = FIRST_PAUSE

    @property
    def expired(self) -> bool:
        return time.monotonic() > self._deadline

    async def pause(self) -> None:
        await asyncio.sleep(self._pause)
        self._pause = min(self._pause * 2, LONGEST_PAUSE)
