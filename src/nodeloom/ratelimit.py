"""Moving-window rate limits, one code path for every store.

A ``Windows`` store counts requests per key: in this process's memory (``LocalWindows``), in a
file shared by the processes of one ``serve --processes N`` (ratelimit_shared.py), or in Redis,
shared by every replica (ratelimit_redis.py). All three keep the same promise, checked by one
contract suite (tests/contracts/test_windows.py):

- a request is allowed while fewer than ``limit`` were counted for its key in the last
  ``window`` seconds; a refused request is not counted;
- ``remaining`` is how many more would be allowed now; ``reset`` (whole seconds, at most
  ``window``) is when the oldest counted request leaves the window and frees its slot;
- counting is atomic in the store, so concurrent requests, from any number of processes
  sharing it, never get more than ``limit`` slots;
- a slot taken with ``take`` can be given back (``give_back``): a limit that counts only
  *accepted* work takes a slot first and returns it if the work is refused.

``RateLimiter`` is what the routes use; which store it holds is chosen from settings
(``runtime.build_windows``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from nodeloom.errors import ServiceUnavailable

log = logging.getLogger("nodeloom")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int

    @classmethod
    def of(
        cls, allowed: bool, limit: int, counted: int, oldest: float | None, window: int, now: float
    ) -> Decision:
        """The answer once ``counted`` requests are in the window, the oldest at ``oldest``
        (same clock as ``now``, in seconds)."""
        # Clamped: float rounding can make a hit counted just now seem to expire after window.
        reset = min(window, math.ceil(oldest + window - now)) if oldest is not None else 0
        return cls(allowed, limit, max(0, limit - counted), max(0, reset))

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


class Windows(Protocol):
    """Where the moving windows live (see the module docstring for what every store promises).
    A store that cannot count right now raises ``ServiceUnavailable`` (503, Retry-After)."""

    async def decide(self, key: str, limit: int, window: int, *, count: bool) -> Decision:
        """Would one more request be allowed? With ``count``, count it if so."""
        ...

    async def take(self, key: str, limit: int, window: int) -> tuple[Decision, Any]:
        """Count one request if allowed; the stamp (None when refused) lets ``give_back``
        undo exactly this one."""
        ...

    async def give_back(self, key: str, stamp: Any) -> None: ...

    async def close(self) -> None: ...


class LocalWindows:
    """Moving windows in this process's memory: per key, the times of counted requests.

    Used instead of ``limits``' MemoryStorage, whose background expiry hands keys to a
    thread: under load that was ~8% of the server's CPU (bench/bench_webhooks.py profile).
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
        oldest = hits[0] if hits else None
        return Decision.of(allowed, limit, len(hits), oldest, window, now), stamp

    async def take(self, key: str, limit: int, window: int) -> tuple[Decision, float | None]:
        return self._decide(key, limit, window, count=True)

    async def give_back(self, key: str, stamp: float) -> None:
        hits = self._hits.get(key)
        if hits is not None:
            with contextlib.suppress(ValueError):
                hits.remove(stamp)

    async def close(self) -> None:
        return None


class RateLimiter:
    """The routes' view of the windows, whichever store holds them."""

    def __init__(self, windows: Windows | None = None) -> None:
        self.windows: Windows = windows or LocalWindows()

    async def hit(self, key: str, limit: int, window_seconds: int = 60) -> Decision:
        """Count one request against ``key``; refused requests do not count."""
        return await self.windows.decide(key, limit, window_seconds, count=True)

    async def check(self, key: str, limit: int, window_seconds: int = 60) -> Decision:
        """Would one more request be allowed? Counts nothing."""
        return await self.windows.decide(key, limit, window_seconds, count=False)

    @contextlib.asynccontextmanager
    async def reserve(
        self, key: str, limit: int, window_seconds: int = 60
    ) -> AsyncIterator[Reservation]:
        """Count a request only if the block succeeds (e.g. the run was accepted).

        The slot is taken at once (atomically in the store, so two concurrent requests, in
        one process or in two replicas, can never both take the last one) and given back if
        the block raises; concurrent requests never wait for each other.
        The block must look at ``reservation.decision.allowed`` first.
        """
        decision, stamp = await self.windows.take(key, limit, window_seconds)
        reservation = Reservation(decision)
        try:
            yield reservation
        except BaseException:
            if stamp is not None:
                try:
                    await self.windows.give_back(key, stamp)
                    reservation.decision = await self.check(key, limit, window_seconds)
                except ServiceUnavailable:
                    # The block's own error is the answer; a slot not given back only makes
                    # the window stricter until it moves on.
                    log.warning("rate limit %s: a reserved slot could not be given back", key)
            raise

    async def close(self) -> None:
        """Close the store's connection (Redis) or file (shared windows)."""
        await self.windows.close()
