"""The rate-limit contract: every ``Windows`` store (in memory, a file shared by the processes
of one server, Redis shared by replicas) gives the same answers to the same requests.

Each test gets two handles on one store, ``a`` and ``b``: two processes on one file, two
replicas on one Redis (its own key namespace per test), or, in memory, the one process's
store twice. Windows are real time; the tests that watch a window move use 2 s windows and
sleep until well past each edge, measured from when each hit was answered.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodeloom.errors import ServiceUnavailable
from nodeloom.ratelimit import LocalWindows, RateLimiter, Windows
from nodeloom.ratelimit_redis import RedisWindows
from nodeloom.ratelimit_shared import SharedWindows
from tests.server import free_port
from tests.services import REDIS_URL, require_redis

Pair = tuple[Windows, Windows]


@pytest.fixture(
    params=["local", "shared", pytest.param("redis", marks=pytest.mark.redis)],
)
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pair]:
    stores: list[Windows]
    if request.param == "local":
        local = LocalWindows()
        stores = [local, local]
    elif request.param == "shared":
        path = tmp_path / "limits.sqlite3"
        stores = [SharedWindows(path), SharedWindows(path)]
    else:
        require_redis()
        namespace = f"nltest-{uuid.uuid4().hex}"
        stores = [RedisWindows(REDIS_URL, namespace), RedisWindows(REDIS_URL, namespace)]
    try:
        yield stores[0], stores[1]
    finally:
        for store in {id(s): s for s in stores}.values():
            await store.close()


async def _hit(store: Windows, key: str, limit: int, window: int) -> tuple[bool, float]:
    """Count one; whether it was allowed and when the answer came (monotonic)."""
    decision = await store.decide(key, limit, window, count=True)
    return decision.allowed, time.monotonic()


async def _sleep_until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.monotonic()))


class TestCounting:
    async def test_the_limit_is_reached_at_exactly_n(self, pair: Pair) -> None:
        a, b = pair
        answers = [await (a if i % 2 else b).decide("k", 5, 60, count=True) for i in range(7)]
        assert [d.allowed for d in answers] == [True] * 5 + [False] * 2
        assert [d.remaining for d in answers] == [4, 3, 2, 1, 0, 0, 0]
        assert {d.limit for d in answers} == {5}

    async def test_a_check_counts_nothing_and_sees_the_others_hits(self, pair: Pair) -> None:
        a, b = pair
        fresh = await a.decide("k", 3, 60, count=False)
        assert (fresh.allowed, fresh.remaining, fresh.reset_seconds) == (True, 3, 0)
        for _ in range(2):
            await b.decide("k", 3, 60, count=True)
        for _ in range(3):
            peek = await a.decide("k", 3, 60, count=False)
            assert (peek.allowed, peek.remaining) == (True, 1)
        await b.decide("k", 3, 60, count=True)
        full = await a.decide("k", 3, 60, count=False)
        assert (full.allowed, full.remaining) == (False, 0)

    async def test_reset_is_when_the_oldest_hit_leaves_the_window(self, pair: Pair) -> None:
        a, b = pair
        first = await a.decide("k", 2, 60, count=True)
        assert first.reset_seconds == 60  # counted just now: a whole window to go
        second = await b.decide("k", 2, 60, count=True)
        assert 59 <= second.reset_seconds <= 60
        refused = await a.decide("k", 2, 60, count=True)
        assert not refused.allowed and 59 <= refused.reset_seconds <= 60
        headers = refused.headers()
        assert headers["RateLimit-Limit"] == "2" and headers["RateLimit-Remaining"] == "0"
        assert 59 <= int(headers["Retry-After"]) <= 60
        assert "Retry-After" not in first.headers()

    async def test_keys_are_independent(self, pair: Pair) -> None:
        a, b = pair
        for _ in range(3):
            assert (await a.decide("one", 3, 60, count=True)).allowed
        assert not (await b.decide("one", 3, 60, count=True)).allowed
        other = await b.decide("two", 3, 60, count=True)
        assert (other.allowed, other.remaining) == (True, 2)
        assert (await a.decide("one", 3, 60, count=False)).remaining == 0

    async def test_concurrent_hits_never_get_more_than_n(self, pair: Pair) -> None:
        a, b = pair
        answers = await asyncio.gather(
            *(s.decide("k", 7, 60, count=True) for _ in range(20) for s in (a, b))
        )
        assert sum(d.allowed for d in answers) == 7
        assert (await a.decide("k", 7, 60, count=False)).remaining == 0


class TestTheWindowMoves:
    async def test_slots_free_one_at_a_time(self, pair: Pair) -> None:
        """Hits at 0 s and 1 s in a 2 s window: the first slot frees at 2 s, the second at
        3 s, each on its own."""
        a, b = pair
        allowed, first_at = await _hit(a, "k", 2, 2)
        assert allowed
        await _sleep_until(first_at + 1.0)
        allowed, second_at = await _hit(b, "k", 2, 2)
        assert allowed
        assert not (await a.decide("k", 2, 2, count=True)).allowed

        await _sleep_until(first_at + 2.3)  # the first has left; the second has not
        one_free = await b.decide("k", 2, 2, count=False)
        assert (one_free.allowed, one_free.remaining) == (True, 1)
        assert 1 <= one_free.reset_seconds <= 2  # the second hit's edge
        allowed, third_at = await _hit(a, "k", 2, 2)
        assert allowed
        assert not (await b.decide("k", 2, 2, count=True)).allowed

        await _sleep_until(second_at + 2.3)
        again = await a.decide("k", 2, 2, count=False)
        assert (again.allowed, again.remaining) == (True, 1)
        assert time.monotonic() < third_at + 2  # the third still holds its slot

    async def test_a_refused_request_does_not_push_the_window(self, pair: Pair) -> None:
        a, b = pair
        allowed, at = await _hit(a, "k", 1, 1)
        assert allowed
        for _ in range(5):  # refused: not counted, so they never extend the wait
            assert not (await b.decide("k", 1, 1, count=True)).allowed
            await asyncio.sleep(0.1)
        await _sleep_until(at + 1.2)
        assert (await b.decide("k", 1, 1, count=True)).allowed


class TestGivingBack:
    async def test_a_slot_given_back_frees_exactly_that_slot(self, pair: Pair) -> None:
        a, b = pair
        decision, first = await a.take("k", 2, 60)
        assert decision.allowed and first is not None
        await b.take("k", 2, 60)
        refused, none = await a.take("k", 2, 60)
        assert not refused.allowed and none is None
        await b.give_back("k", first)  # the other process gives back a's slot
        assert (await a.decide("k", 2, 60, count=False)).remaining == 1
        assert (await b.decide("k", 2, 60, count=True)).allowed
        assert not (await a.decide("k", 2, 60, count=True)).allowed

    async def test_reservations_count_only_the_blocks_that_succeed(self, pair: Pair) -> None:
        """12 reservations at once through two limiters, every other block refusing its
        work: never more than the limit kept, and every refused one's slot returned."""
        limiters = [RateLimiter(store) for store in pair]
        kept = 0

        class Refused(Exception):
            pass

        async def attempt(i: int) -> None:
            nonlocal kept
            async with limiters[i % 2].reserve("hook", 4) as reservation:
                if not reservation.decision.allowed:
                    return
                await asyncio.sleep(0.01)  # the run being created
                if i % 3 == 0:
                    raise Refused
                kept += 1

        results = await asyncio.gather(*(attempt(i) for i in range(12)), return_exceptions=True)
        assert all(r is None or isinstance(r, Refused) for r in results)
        assert 1 <= kept <= 4
        left = await pair[0].decide("hook", 4, 60, count=False)
        assert left.remaining == 4 - kept


async def test_redis_unreachable_is_service_unavailable() -> None:
    """Redis cannot count: the request is not served uncounted, it is a 503 to retry."""
    store = RedisWindows(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        with pytest.raises(ServiceUnavailable) as caught:
            await store.decide("k", 5, 60, count=True)
        assert caught.value.headers == {"Retry-After": "2"}
    finally:
        await store.close()
