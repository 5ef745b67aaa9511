"""The Redis link between processes' event buses (events/links.py says what a link does).

A module of its own so that a process without ``NODELOOM_REDIS_URL`` (every embedded server)
never imports redis-py: the runtime imports it only when it builds this bus."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import orjson
import sqlalchemy as sa
from redis.asyncio import Redis
from redis.exceptions import RedisError

from nodeloom.db.models import utcnow
from nodeloom.events.links import CHANNEL, CatchingUpBus, LogReader, decode, encode, log
from nodeloom.events.model import Event
from nodeloom.redis_options import client_options
from nodeloom.redis_wire import RedisWire

RECONNECT_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)
PUBLISH_LINGER_SECONDS = 0.005
STOP_STEP_SECONDS = 5.0  # the most each step of RedisBus.stop may take


def _origin_prefix(origin: str) -> bytes:
    """How every message ``encode`` makes for ``origin`` begins (orjson keeps the key order),
    so a process knows its own messages without decoding them."""
    return b'{"origin":' + orjson.dumps(origin) + b","


class RedisBus(CatchingUpBus):
    """Publishing is batched: the events committed within ``PUBLISH_LINGER_SECONDS`` of
    each other, or while a PUBLISH is on its way, leave together (one message, in commit
    order), so a busy API replica sends one Redis command per batch, not one per run, and
    ``publish`` never waits for Redis.
    Received messages are decoded only when they come from another process and someone
    here listens (every process receives every message of the channel)."""

    def __init__(self, redis_url: str, origin: str, reader: LogReader) -> None:
        super().__init__(reader)
        self.origin = origin
        self._own = _origin_prefix(origin)
        self.redis: Redis = Redis.from_url(redis_url, **client_options())
        self._wire = RedisWire(redis_url)  # the PUBLISHes: redis_wire.py
        self._listener: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self._outbox: list[Event] = []
        self._sender: asyncio.Task[None] | None = None

    async def publish(self, events: list[Event]) -> None:
        self.deliver(events)
        if not events:
            return
        self._outbox.extend(events)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send(), name="redis-publish")

    async def _send(self) -> None:
        # A moment for the commits of other requests to join this message: one PUBLISH
        # per batch instead of one per run (each is a round trip and a wake-up of Redis
        # and of every subscribed process); live copies reach other processes that much
        # later, the publishing process's own subscribers at once.
        await asyncio.sleep(PUBLISH_LINGER_SECONDS)
        while self._outbox:
            batch, self._outbox = self._outbox, []
            try:
                await self._wire.call("PUBLISH", CHANNEL, encode(self.origin, batch))
            except (RedisError, OSError) as exc:
                # Others miss the live copy; they catch up from the log when Redis is back.
                log.warning("could not publish events to Redis: %s", exc)

    async def flush(self) -> None:
        """Until every event published so far has left (or failed to)."""
        while self._sender is not None and not self._sender.done():
            await asyncio.shield(self._sender)

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="redis-events")

    async def stop(self) -> None:
        """Send what is queued, then close. Each step is bounded: a shutdown must not hang
        on a Redis that stopped answering, nor on a redis-py connection whose close waits
        for a reader that is gone (redis-py's own close can wait on the transport)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), STOP_STEP_SECONDS)
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.wait({self._listener}, timeout=STOP_STEP_SECONDS)
        await self._wire.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.redis.aclose(), STOP_STEP_SECONDS)

    async def _listen(self) -> None:
        attempt = 0
        lost_at: datetime | None = None
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    self.connected.set()
                    attempt = 0
                    if lost_at is not None:
                        await self.catch_up(lost_at)
                        lost_at = None
                    async for message in pubsub.listen():
                        if message.get("type") != "message" or not self._by_key:
                            continue  # nobody here follows anything: nothing to deliver
                        data = message["data"]
                        if data.startswith(self._own):
                            continue  # delivered here when it was published
                        origin, events = decode(data)
                        if origin != self.origin:
                            self.deliver(events)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, ValueError, KeyError, sa.exc.SQLAlchemyError) as exc:
                # A catch-up that could not read the log (the database unreachable too)
                # is retried with the next connection, from the same moment.
                self.connected.clear()
                lost_at = lost_at or utcnow()
                delay = RECONNECT_SECONDS[min(attempt, len(RECONNECT_SECONDS) - 1)]
                attempt += 1
                log.warning("Redis event channel lost (%s); retrying in %s s", exc, delay)
                await asyncio.sleep(delay)

    async def ready(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except (RedisError, OSError):
            return False
