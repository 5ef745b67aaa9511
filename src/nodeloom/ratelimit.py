"""A thin layer over ``limits``: moving windows, in memory or in Redis (shared by replicas)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from limits import RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter


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
        self._limiter = MovingWindowRateLimiter(self.storage)

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
