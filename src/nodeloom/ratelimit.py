"""A thin layer over ``limits``: moving windows, in memory or in Redis (shared by replicas)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from limits import RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter

from nodeloom.errors import ServiceUnavailable

LOCK_SECONDS = 10


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int

    def headers(self) -> dict[str, str]:
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_seconds),
        }
        if not self.allowed:
            headers["Retry-After"] = str(max(1, self.reset_seconds))
        return headers


class RateLimiter:
    def __init__(self, redis_url: str | None = None, namespace: str = "nodeloom") -> None:
        self.storage: Storage
        if redis_url:
            url = redis_url if redis_url.startswith("async+") else "async+" + redis_url
            self.storage = RedisStorage(url, implementation="redispy", key_prefix=namespace)
        else:
            self.storage = MemoryStorage()
        self.shared = bool(redis_url)
        self._limiter = MovingWindowRateLimiter(self.storage)
        self._local_locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def hit(self, key: str, limit: int, window_seconds: int = 60) -> Decision:
        """Count one request against ``key``; refused requests do not count."""
        item = RateLimitItemPerSecond(limit, window_seconds)
        allowed = await self._limiter.hit(item, key)
        return await self._decision(item, key, allowed)

    async def check(self, key: str, limit: int, window_seconds: int = 60) -> Decision:
        """Would one more request be allowed? Counts nothing."""
        item = RateLimitItemPerSecond(limit, window_seconds)
        allowed = await self._limiter.test(item, key)
        return await self._decision(item, key, allowed)

    async def _decision(self, item: RateLimitItemPerSecond, key: str, allowed: bool) -> Decision:
        stats = await self._limiter.get_window_stats(item, key)
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        return Decision(allowed, item.amount, max(0, stats.remaining), reset)

    async def clear(self, key: str, limit: int, window_seconds: int = 60) -> None:
        await self._limiter.clear(RateLimitItemPerSecond(limit, window_seconds), key)

    @contextlib.asynccontextmanager
    async def exclusive(self, key: str, wait_seconds: float = LOCK_SECONDS) -> AsyncIterator[None]:
        """Run a ``check`` -> act -> ``hit`` sequence for ``key`` alone.

        ``limits`` cannot take a hit back, so a limit that must count only *accepted* requests
        checks first and hits after the work succeeded. Between the two, a concurrent request
        could pass the same last slot; holding this lock around the sequence prevents that.
        In one process an asyncio lock serialises; with Redis a lock made of a limit-1 moving
        window (atomic in Redis, expires after LOCK_SECONDS if its holder dies) serialises
        replicas too.
        """
        lock, users = self._local_locks.get(key, (asyncio.Lock(), 0))
        self._local_locks[key] = (lock, users + 1)
        try:
            async with lock:
                if not self.shared:
                    yield
                    return
                item = RateLimitItemPerSecond(1, LOCK_SECONDS)
                lock_key = f"lock:{key}"
                deadline = time.monotonic() + wait_seconds
                while not await self._limiter.hit(item, lock_key):
                    if time.monotonic() > deadline:
                        raise ServiceUnavailable(
                            "The rate-limit lock is busy; retry shortly.",
                            headers={"Retry-After": "1"},
                        )
                    await asyncio.sleep(0.005)
                try:
                    yield
                finally:
                    await self._limiter.clear(item, lock_key)
        finally:
            lock, users = self._local_locks[key]
            if users <= 1:
                del self._local_locks[key]
            else:
                self._local_locks[key] = (lock, users - 1)

    async def close(self) -> None:
        """Close the Redis connection pool (nothing to do in memory)."""
        if isinstance(self.storage, RedisStorage):
            client = getattr(self.storage.bridge, "storage", None)
            if client is not None:
                await client.aclose()
