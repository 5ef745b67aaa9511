"""The rate-limit windows the processes of one ``serve --processes N`` share through a file:
two instances on one file stand for two processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nodeloom.ratelimit import LocalWindows
from nodeloom.ratelimit_shared import SharedWindows
from tests.sqlite_lock import another_writer, loop_turns


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SharedWindows, SharedWindows]:
    path = tmp_path / "limits.sqlite3"
    return SharedWindows(path), SharedWindows(path)


class TestSharedWindows:
    async def test_a_limit_holds_across_processes(
        self, pair: tuple[SharedWindows, SharedWindows]
    ) -> None:
        a, b = pair
        answers = [await (a if i % 2 else b).decide("k", 5, 60, count=True) for i in range(7)]
        assert [d.allowed for d in answers] == [True] * 5 + [False] * 2
        assert [d.remaining for d in answers] == [4, 3, 2, 1, 0, 0, 0]
        assert all(0 < d.reset_seconds <= 60 for d in answers)
        # A check counts nothing, and sees the other process's hits.
        peek = await a.decide("k", 5, 60, count=False)
        assert (peek.allowed, peek.remaining) == (False, 0)
        assert (await b.decide("other", 5, 60, count=False)).remaining == 5

    async def test_a_hit_given_back_frees_its_slot(
        self, pair: tuple[SharedWindows, SharedWindows]
    ) -> None:
        a, b = pair
        _, first = await a.take("k", 2, 60)
        await b.take("k", 2, 60)
        assert not (await a.decide("k", 2, 60, count=False)).allowed
        assert first is not None
        await b.give_back("k", first)
        assert (await a.decide("k", 2, 60, count=False)).remaining == 1
        await a.clear("k")
        assert (await b.decide("k", 2, 60, count=False)).remaining == 2

    async def test_the_window_moves(self, pair: tuple[SharedWindows, SharedWindows]) -> None:
        a, b = pair
        assert (await a.decide("k", 1, 1, count=True)).allowed
        assert not (await b.decide("k", 1, 1, count=True)).allowed
        await asyncio.sleep(1.05)
        assert (await b.decide("k", 1, 1, count=False)).allowed
        assert (await b.decide("k", 1, 1, count=True)).allowed

    async def test_same_answers_as_the_in_memory_windows(
        self, pair: tuple[SharedWindows, SharedWindows]
    ) -> None:
        shared, _ = pair
        local = LocalWindows()
        for i in range(25):
            count = i % 3 != 0
            s = await shared.decide("k", 10, 60, count=count)
            m = await local.decide("k", 10, 60, count=count)
            assert (s.allowed, s.limit, s.remaining) == (m.allowed, m.limit, m.remaining)

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
