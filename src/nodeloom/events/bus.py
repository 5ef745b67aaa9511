"""The event bus: committed events fan out to live subscribers.

Events are written to ``run_events`` in the same transaction as the change they describe;
the bus only carries them to listeners after the commit. A listener that misses something
(or subscribes late) reads the log, so the bus may drop messages for a slow consumer without
losing anything for good.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Protocol

from nodeloom.events.model import Event

QUEUE_SIZE = 1024


class Subscription:
    """A bounded queue of events for one listener, filtered by run or workflow ids."""

    def __init__(self, account_id: str) -> None:
        self.account_id = account_id
        self.run_ids: set[str] = set()
        self.workflow_ids: set[str] = set()
        self.queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        self.overflowed = False

    def wants(self, event: Event) -> bool:
        return event.account_id == self.account_id and (
            event.run_id in self.run_ids or event.workflow_id in self.workflow_ids
        )

    def offer(self, event: Event) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            # A consumer that stops reading is dropped by its connection, never waited for.
            self.overflowed = True


class EventBus(Protocol):
    async def publish(self, events: list[Event]) -> None: ...

    def subscribe(self, account_id: str) -> contextlib.AbstractContextManager[Subscription]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class MemoryBus:
    """In-process fan-out for the embedded default."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()

    async def publish(self, events: list[Event]) -> None:
        self.deliver(events)

    def deliver(self, events: list[Event]) -> None:
        if not self._subscriptions:
            return
        for event in events:
            for sub in self._subscriptions:
                if sub.wants(event):
                    sub.offer(event)

    @contextlib.contextmanager
    def subscribe(self, account_id: str) -> Iterator[Subscription]:
        sub = Subscription(account_id)
        self._subscriptions.add(sub)
        try:
            yield sub
        finally:
            self._subscriptions.discard(sub)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
