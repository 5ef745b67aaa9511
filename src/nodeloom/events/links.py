"""Events across processes: a node run by a worker on one host reaches a WebSocket held by an
API replica on another.

Every process keeps its own ``MemoryBus`` (local subscribers, indexed by run and workflow);
a link carries what one process commits to the others:

- ``RedisBus`` (when ``NODELOOM_REDIS_URL`` is set): each process publishes the events it
  committed on one Redis channel and delivers what the others published. Redis pub/sub keeps
  nothing, so after a (re)connection the bus catches up from the event log itself.
- ``PollingBus`` (several processes, no Redis): each process reads the event log for the runs
  and workflows its subscribers follow, a few times a second.

Both rely on the rule that makes the log the truth (events/stream.py): a subscriber drops
what it has already seen and fills any gap from the log, so a link may deliver late, twice
or out of band without a client ever seeing a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, cast

import orjson
import sqlalchemy as sa
from redis.asyncio import Redis
from redis.exceptions import RedisError

from nodeloom import background
from nodeloom.db.engine import Database
from nodeloom.db.models import Run, RunEvent, utcnow
from nodeloom.events.bus import MemoryBus
from nodeloom.events.model import Event
from nodeloom.redis_options import client_options
from nodeloom.redis_wire import RedisWire

log = logging.getLogger("nodeloom.events")

CHANNEL = "nodeloom:events"
RECONNECT_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)
POLL_SECONDS = 0.25
PUBLISH_LINGER_SECONDS = 0.005
STOP_STEP_SECONDS = 5.0  # the most each step of RedisBus.stop may take
OVERLAP = timedelta(seconds=2)  # commits land out of timestamp order by a little
SEEN_KEPT = 50_000  # runs whose last delivered seq a catching-up bus remembers (twice)
_RUNS = cast(sa.Table, Run.__table__)
_EVENTS = cast(sa.Table, RunEvent.__table__)


def encode(origin: str, events: list[Event]) -> bytes:
    return orjson.dumps(
        {
            "origin": origin,
            "events": [
                {
                    "type": e.type,
                    "seq": e.seq,
                    "ts": e.ts.isoformat(),
                    "run_id": e.run_id,
                    "workflow_id": e.workflow_id,
                    "account_id": e.account_id,
                    "node_id": e.node_id,
                    "data": e.data,
                }
                for e in events
            ],
        }
    )


def decode(raw: bytes) -> tuple[str, list[Event]]:
    body = orjson.loads(raw)
    events = [
        Event(
            type=e["type"],
            seq=int(e["seq"]),
            ts=datetime.fromisoformat(e["ts"]),
            run_id=e["run_id"],
            workflow_id=e["workflow_id"],
            account_id=e["account_id"],
            node_id=e.get("node_id"),
            data=e.get("data") or {},
        )
        for e in body["events"]
    ]
    return str(body["origin"]), events


class LogReader:
    """Events committed since a moment, for the runs and workflows followed here."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def since(self, when: datetime, runs: list[str], workflows: list[str]) -> list[Event]:
        if not runs and not workflows:
            return []
        query = (
            sa.select(_EVENTS, _RUNS.c.workflow_id, _RUNS.c.account_id)
            .join(_RUNS, _RUNS.c.id == _EVENTS.c.run_id)
            .where(
                _EVENTS.c.ts >= when,
                sa.or_(_EVENTS.c.run_id.in_(runs), _RUNS.c.workflow_id.in_(workflows)),
            )
            .order_by(_EVENTS.c.run_id, _EVENTS.c.seq)
        )
        rows = await self.db.read(lambda c: c.execute(query).all())
        return [
            Event(
                type=r.type,
                seq=r.seq,
                ts=r.ts,
                run_id=r.run_id,
                workflow_id=r.workflow_id,
                account_id=r.account_id,
                node_id=r.node_id,
                data=r.data or {},
            )
            for r in rows
        ]


class _CatchingUp(MemoryBus):
    """A bus that reads from the log what its subscribers may have missed (``catch_up``):
    every poll of ``PollingBus``, and ``RedisBus`` after Redis came back. The log is read
    ``OVERLAP`` further back than the last look, so most of what it returns was delivered
    already; delivering it again filled subscribers' bounded queues with duplicates (every
    poll repeated ~2 s of events), and a subscriber whose queue overflows is disconnected
    however fast it reads. So the bus remembers the highest seq of each run it delivered
    lately, and a catch-up delivers only what comes after it: a subscriber's cursor
    (events/stream.py ``RunCursors``) reads any gap before a live event from the log."""

    def __init__(self, reader: LogReader) -> None:
        super().__init__()
        self.reader = reader
        # Two generations, the older dropped when the newer holds SEEN_KEPT runs: a run
        # forgotten is at worst delivered again (the cursors drop repeats).
        self._seen: dict[str, int] = {}
        self._seen_before: dict[str, int] = {}

    def deliver(self, events: list[Event]) -> None:
        if not self._subscriptions:
            return  # nobody to deliver to, nothing to remember for anybody
        super().deliver(events)
        seen = self._seen
        for event in events:
            if event.seq > seen.get(event.run_id, 0):
                seen[event.run_id] = event.seq
        if len(seen) > SEEN_KEPT:
            self._seen_before, self._seen = seen, {}

    async def catch_up(self, since: datetime) -> None:
        """Deliver from the log what subscribers here may have missed since ``since``."""
        runs = [key for kind, key in self._by_key if kind == "run"]
        workflows = [key for kind, key in self._by_key if kind == "workflow"]
        events = await self.reader.since(since - OVERLAP, runs, workflows)
        fresh = [event for event in events if event.seq > self._delivered(event.run_id)]
        if fresh:
            self.deliver(fresh)

    def _delivered(self, run_id: str) -> int:
        return max(self._seen.get(run_id, 0), self._seen_before.get(run_id, 0))


def _origin_prefix(origin: str) -> bytes:
    """How every message ``encode`` makes for ``origin`` begins (orjson keeps the key order),
    so a process knows its own messages without decoding them."""
    return b'{"origin":' + orjson.dumps(origin) + b","


class RedisBus(_CatchingUp):
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


class PollingBus(_CatchingUp):
    def __init__(self, reader: LogReader, interval: float = POLL_SECONDS) -> None:
        super().__init__(reader)
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="event-poll")

    async def stop(self) -> None:
        await background.cancel_and_wait(self._task)

    async def _poll(self) -> None:
        since = utcnow()
        while True:
            await asyncio.sleep(self.interval)
            if not self._by_key:
                since = utcnow()
                continue
            started = utcnow()
            try:
                await self.catch_up(since)
                since = started
            except Exception:
                log.warning("could not read the event log", exc_info=True)


ReadyCheck = Callable[[], Awaitable[bool]]


def readiness(bus: Any) -> ReadyCheck | None:
    return cast(ReadyCheck, bus.ready) if isinstance(bus, RedisBus) else None
