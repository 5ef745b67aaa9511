"""For tests of code that must wait for another process's SQLite lock without holding the
event loop: that other process (a connection holding the write lock), and a count of the
loop's turns while the code waits."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path


@contextlib.contextmanager
def another_writer(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection holding ``path``'s write lock (BEGIN IMMEDIATE) until it commits."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield other
    finally:
        other.close()


class LoopTurns:
    count = 0


@contextlib.asynccontextmanager
async def loop_turns() -> AsyncIterator[LoopTurns]:
    """Counts the loop's turns (one a millisecond at most) while inside: a loop held by
    blocking work counts none."""
    turns = LoopTurns()

    async def tick() -> None:
        while True:
            turns.count += 1
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(tick())
    try:
        yield turns
    finally:
        ticking.cancel()
