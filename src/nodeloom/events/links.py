"""Events across processes: a node run by a worker on one host reaches a WebSocket held by an
API replica on another.

Every process keeps its own ``MemoryBus`` (local subscribers, indexed by run and workflow);
a link carries what one process commits to the others:

- ``RedisBus`` (events/redis_bus.py, when ``NODELOOM_REDIS_URL`` is set): each process
  publishes the events it committed on one Redis channel and delivers what the others
  published. Redis pub/sub keeps nothing, so after a (re)connection the bus catches up from
  the event log itself.
- ``PollingBus`` (several processes, no Redis): each process reads the event log for the runs
  and workflows its subscribers follow, a few times a second.

Both rely on the rule that makes the log the truth (events/stream.py): a subscriber drops
what it has already seen and fills any gap from the log, so a link may deliver late, twice
or out of band without a client ever seeing a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, cast

import orjson
import sqlalchemy as sa

from nodeloom import background
from nodeloom.db.engine import Database
from nodeloom.db.models import Run, RunEvent, utcnow
from nodeloom.events.bus import MemoryBus
from nodeloom.events.model import Event

log = logging.getLogger("nodeloom.events")

CHANNEL = "nodeloom:events"
POLL_SECONDS = 0.25
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


class CatchingUpBus(MemoryBus):
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


class PollingBus(CatchingUpBus):
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
    """The check of the broker behind a bus (Redis), if it has one: the others have none."""
    ready = getattr(bus, "ready", None)
    return cast(ReadyCheck, ready) if ready is not None else None
