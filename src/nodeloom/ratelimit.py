"""Moving-window rate limits: in this process's memory, or in Redis through ``limits``
(shared by replicas)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from limits import RateLimitItemPerSecond
from limits.aio.storage import RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from redis.exceptions import RedisError

from nodeloom.errors import ServiceUnavailable
from nodeloom.redis_options import client_options

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


@dataclass
class Reservation:
    decision: Decision


class LocalWindows:
    """Moving windows in this process's memory: per key, the times of counted requests.

    Used instead of ``limits``' MemoryStorage, whose background expiry hands keys to a
    thread: under load that was ~8% of the server's CPU (bench/bench_webhooks.py profile).
    Same semantics: a request is allowed while fewer than ``limit`` were counted in the
    last ``window`` seconds; ``reset`` is when the oldest counted request leaves the window.
    """

    SWEEP_EVERY = 10_000

    def __init__(self) -> None:
        self._hits: dict[str, deque[float]] = {}
        self._ops = 0

    def _window(self, key: str, window: float, now: float) -> deque[float]:
        hits = self._hits.get(key)
        if hits is None:
            hits = self._hits[key] = deque()
        edge = now - window
        while hits and hits[0] <= edge:
            hits.popleft()
        return hits

    def _sweep(self, now: float, window: float) -> None:
        self._ops += 1
        if self._ops % self.SWEEP_EVERY == 0:
            edge = now - window
            for key in [k for k, v in self._hits.items() if not v or v[-1] <= edge]:
                del self._hits[key]

    async def decide(self, key: str, limit: int, window: int, *, count: bool) -> Decision:
        return self._decide(key, limit, window, count=count)[0]

    def _decide(
        self, key: str, limit: int, window: int, *, count: bool
    ) -> tuple[Decision, float | None]:
        now = time.monotonic()
        self._sweep(now, window)
        hits = self._window(key, window, now)
        allowed = len(hits) < limit
        stamp = None
        if allowed and count:
            hits.append(now)
            stamp = now
        remaining = max(0, limit - len(hits))
        # Clamped: float rounding can make a hit counted just now seem to expire after window.
        reset = min(window, math.ceil(hits[0] + window - now)) if hits else 0
        return Decision(allowed, limit, remaining, max(0, reset)), stamp

    async def take(self, key: str, limit: int, window: int) -> tuple[Decision, float | None]:
        """Count one request now; the stamp lets ``give_back`` undo exactly this one."""
        return self._decide(key, limit, window, count=True)

    async def give_back(self, key: str, stamp: float) -> None:
        hits = self._hits.get(key)
        if hits is not None:
            with contextlib.suppress(ValueError):
                hits.remove(stamp)

    async def clear(self, key: str) -> None:
        self._hits.pop(key, None)


@contextlib.contextmanager
def _redis_errors() -> Iterator[None]:
    """Redis unreachable: the request cannot be counted, so it is not served — a 503 the
    client may retry, never a 500."""
    try:
        yield
    except (RedisError, OSError, ConnectionError) as exc:
        raise ServiceUnavailable(
            "Rate limits cannot be checked right now (Redis is unreachable); retry shortly.",
            headers={"Retry-After": "2"},
        ) from exc


class Windows(Protocol):
    """Moving windows without Redis: ``LocalWindows`` in one process, or ``SharedWindows``
    (ratelimit_shared.py) across the processes of one ``serve --processes N``."""

    async def decide(self, key: str, limit: int, window: int, *, count: bool) -> Decision: ...

    async def take(self, key: str, limit: int, window: int) -> tuple[Decision, Any]: ...

    async def give_back(self, key: str, stamp: Any) -> None: ...

    async def clear(self, key: str) -> None: ...


class RateLimiter:
    def __init__(
        self,
        redis_url: str | None = None,
        namespace: str = "nodeloom",
        windows: Windows | None = None,
    ) -> None:
        self.storage: Storage | None = None
        self._limiter: MovingWindowRateLimiter | None = None
        self._local: Windows = windows or LocalWindows()
        if redis_url:
            url = redis_url if redis_url.startswith("async+") else "async+" + redis_url
            self.storage = RedisStorage(
                url, implementation="redispy", key_prefix=namespace, **client_options()
            )
            self._limiter = MovingWindowRateLimiter(self.storage)
        self.shared = bool(redis_url)
        self._local_locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def hit(self, key: str, limit: int, window_seconds: int = 60) -> Decision:
        """Count one request against ``key``; refused requests do not count."""
        if self._limiter is None:
            return await self._local.decide(key, limit, window_seconds, count=True)
        item = RateLimitItemPerSecond(limit, window_seconds)
        with _redis_errors():
            allowed = await self._limiter.hit(item, key)
            return await self._decision(item, key, allowed)

    async def check(self, key: str, limit: int, window_seconds: int = 60) -> Decision:
        """Would one more request be allowed? Counts nothing."""
        if self._limiter is None:
            return await self._local.decide(key, limit, window_seconds, count=False)
        item = RateLimitItemPerSecond(limit, window_seconds)
        with _redis_errors():
            allowed = await self._limiter.test(item, key)
            return await self._decision(item, key, allowed)

    async def _decision(self, item: RateLimitItemPerSecond, key: str, allowed: bool) -> Decision:
        assert self._limiter is not None
        stats = await self._limiter.get_window_stats(item, key)
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        return Decision(allowed, item.amount, max(0, stats.remaining), reset)

    async def clear(self, key: str, limit: int, window_seconds: int = 60) -> None:
        if self._limiter is None:
            await self._local.clear(key)
            return
        with _redis_errors():
            await self._limiter.clear(RateLimitItemPerSecond(limit, window_seconds), key)

    @contextlib.asynccontextmanager
    async def reserve(
        self, key: str, limit: int, window_seconds: int = 60
    ) -> AsyncIterator[Reservation]:
        """Count a request only if the block succeeds (e.g. the run was accepted).

        In memory the slot is taken at once and given back if the block raises, so
        concurrent requests never wait for each other. ``limits`` cannot give a hit back, so
        with Redis the check -> block -> hit sequence runs under ``exclusive``.
        The block must look at ``reservation.decision.allowed`` first.
        """
        if self._limiter is None:
            decision, stamp = await self._local.take(key, limit, window_seconds)
            reservation = Reservation(decision)
            try:
                yield reservation
            except BaseException:
                if stamp is not None:
                    await self._local.give_back(key, stamp)
                    reservation.decision = await self._local.decide(
                        key, limit, window_seconds, count=False
                    )
                raise
            return
        async with self.exclusive(key):
            reservation = Reservation(await self.check(key, limit, window_seconds))
            yield reservation
            if reservation.decision.allowed:
                reservation.decision = await self.hit(key, limit, window_seconds)

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
                assert self._limiter is not None
                item = RateLimitItemPerSecond(1, LOCK_SECONDS)
                lock_key = f"lock:{key}"
                deadline = time.monotonic() + wait_seconds
                while not await self.hit_raw(item, lock_key):
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

    async def hit_raw(self, item: RateLimitItemPerSecond, key: str) -> bool:
        assert self._limiter is not None
        with _redis_errors():
            return bool(await self._limiter.hit(item, key))

    async def close(self) -> None:
        """Close the Redis connection pool or the shared windows' file."""
        close = getattr(self._local, "close", None)
        if close is not None:
            close()
        if isinstance(self.storage, RedisStorage):
            client = getattr(self.storage.bridge, "storage", None)
            if client is not None:
                await client.aclose()
