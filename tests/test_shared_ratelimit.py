"""What is particular to the rate-limit windows the processes of one ``serve --processes N``
share through a file (two instances on one file stand for two processes). What every store
of windows promises, this one included: tests/contracts/test_windows.py."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodeloom.ratelimit_shared import SharedWindows, prepare
from tests.at_once import OPENED, at_once
from tests.sqlite_lock import another_writer, loop_turns

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

# Without ``prepare``: 285 of 600 processes failed in a script of 300 attempts, and this
# test failed 5 runs in 5 (it takes about 4 s with it).
ATTEMPTS_AT_ONCE = 200


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[SharedWindows, SharedWindows]]:
    path = tmp_path / "limits.sqlite3"
    a, b = SharedWindows(path), SharedWindows(path)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


class TestSharedWindows:
    async def test_a_large_window_counts_exactly(
        self, pair: tuple[SharedWindows, SharedWindows]
    ) -> None:
        a, b = pair
        for i in range(3000):
            await (a if i % 2 else b).decide("big", 10**9, 60, count=True)
        _, stamp = await a.take("big", 10**9, 60)
        assert stamp is not None
        await b.give_back("big", stamp)
        assert (await b.decide("big", 10**9, 60, count=False)).remaining == 10**9 - 3000
        assert (await a.decide("big", 10**9, 60, count=True)).remaining == 10**9 - 3001

    async def test_a_locked_file_is_waited_for_without_blocking_the_loop(
        self, tmp_path: Path, pair: tuple[SharedWindows, SharedWindows]
    ) -> None:
        a, _ = pair
        with another_writer(tmp_path / "limits.sqlite3") as other:
            async with loop_turns() as turns:
                counting = asyncio.create_task(a.decide("k", 3, 60, count=True))
                await asyncio.sleep(0.1)
                assert not counting.done() and turns.count > 20  # waiting, the loop goes on
            other.execute("COMMIT")
            assert (await asyncio.wait_for(counting, 1)).remaining == 2


# 200 rounds of forking the test process twice: late in a full run that process holds
# over 2 GB, and beside other work the rounds outlasted the suite's 120 s timeout.
@pytest.mark.timeout(600)
def test_a_prepared_file_opens_in_every_process_starting_at_once(tmp_path: Path) -> None:
    """``serve --processes N`` starts its children together. Two that set a new file up at
    once could deadlock switching it to WAL, and SQLite failed one without waiting (one
    child in two died at start). The supervisor prepares the file first; then none fails."""
    for attempt in range(ATTEMPTS_AT_ONCE):
        path = tmp_path / f"limits-{attempt}.sqlite3"
        prepare(path)

        def open_windows(path: Path = path) -> None:
            asyncio.run(SharedWindows(path).close())

        assert at_once(open_windows) == [OPENED, OPENED]
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
