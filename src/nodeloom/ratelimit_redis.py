"""Moving-window rate limits in Redis, shared by every replica of a scaled-out fleet.

Per key, a sorted set holds the counted requests: each member a random stamp, scored by the
moment it was counted (microseconds of Redis's own clock, so replicas whose clocks disagree
still agree on the window). One Lua script does the whole decision atomically in Redis: drop
the members that left the window, count the rest, maybe add one, read the oldest. Two replicas
counting the same key are serialised by Redis itself, so a limit of 10 a minute is 10 for the
fleet, and no lock is needed around a reservation: a slot given back is one ``ZREM`` of its
stamp.

The key expires a window after its last hit, so idle keys cost Redis nothing.

Same semantics as the other ``Windows`` stores (ratelimit.py). When Redis cannot be reached
the request cannot be counted, so it is not served: a 503 with Retry-After the client may
retry, never a 500 (and never an uncounted request let through).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator

from redis.exceptions import NoScriptError, RedisError

from nodeloom.errors import ServiceUnavailable
from nodeloom.ratelimit import Decision
from nodeloom.redis_wire import RedisWire

# KEYS[1] the window's key; ARGV: limit, window in microseconds, stamp to add ('' = count
# nothing). Returns allowed (0/1), how many are counted now, the oldest's score ('' if none)
# and Redis's clock, both in microseconds (as strings: Lua numbers would be truncated).
_DECIDE = """
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local stamp = ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local counted = redis.call('ZCARD', key)
local allowed = 0
if stamp ~= '' and redis.call('ZSCORE', key, stamp) then
  allowed = 1  -- counted by this very call, sent again after a lost reply
elseif counted < limit then
  allowed = 1
  if stamp ~= '' then
    redis.call('ZADD', key, now, stamp)
    redis.call('PEXPIRE', key, math.ceil(window / 1000))
    counted = counted + 1
  end
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {allowed, counted, oldest[2] or '', string.format('%d', now)}
"""

# Redis names a cached script by its SHA-1 (EVALSHA).
_DECIDE_SHA = hashlib.sha1(_DECIDE.encode(), usedforsecurity=False).hexdigest()
_MICRO = 1_000_000


@contextlib.contextmanager
def _redis_errors() -> Iterator[None]:
    try:
        yield
    except (RedisError, OSError, ConnectionError) as exc:
        raise ServiceUnavailable(
            "Rate limits cannot be checked right now (Redis is unreachable); retry shortly.",
            headers={"Retry-After": "2"},
        ) from exc


class RedisWindows:
    """On the lean connection (redis_wire.py): one script call a decision."""

    def __init__(self, redis_url: str, namespace: str = "nodeloom:ratelimit") -> None:
        self.redis = RedisWire(redis_url)
        self.namespace = namespace

    async def decide(self, key: str, limit: int, window: int, *, count: bool) -> Decision:
        return (await self._run(key, limit, window, count=count))[0]

    async def take(self, key: str, limit: int, window: int) -> tuple[Decision, str | None]:
        return await self._run(key, limit, window, count=True)

    async def give_back(self, key: str, stamp: str) -> None:
        with _redis_errors():
            await self.redis.call("ZREM", self._key(key), stamp)

    async def close(self) -> None:
        await self.redis.close()

    def _key(self, key: str) -> str:
        return f"{self.namespace}:{key}"

    async def _run(
        self, key: str, limit: int, window: int, *, count: bool
    ) -> tuple[Decision, str | None]:
        stamp = os.urandom(8).hex() if count else ""
        args = (1, self._key(key), limit, window * _MICRO, stamp)
        with _redis_errors():
            try:
                allowed, counted, oldest, now = await self.redis.call("EVALSHA", _DECIDE_SHA, *args)
            except NoScriptError:  # a Redis that restarted forgot it: EVAL caches it again
                allowed, counted, oldest, now = await self.redis.call("EVAL", _DECIDE, *args)
        decision = Decision.of(
            bool(allowed),
            limit,
            int(counted),
            float(oldest) / _MICRO if oldest else None,
            window,
            int(now) / _MICRO,
        )
        return decision, stamp if count and decision.allowed else None
