"""The event bus: committed events fan out to live subscribers.

Events are written to ``run_events`` in the same transaction as the change they describe;
the bus only carries them to listeners after the commit. A listener that misses something
(or subscribes late) reads the log, so the bus may drop messages for a slow consumer without
losing anything for good.

The interface is four methods (``publish``, ``subscribe``, ``start``, ``stop``) plus the
``Subscription`` a listener holds. A listener says what it wants with ``watch_run`` /
``watch_workflow`` (and the ``unwatch_*`` pair); the subscription tells its bus through the
``SubscriptionIndex`` hook, so a bus can route by key (MemoryBus: a dict look-up per event, not
a scan of every listener; a Redis bus: channel subscriptions) without the endpoints knowing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Literal, Protocol

from nodeloom.events.model import Event

QUEUE_SIZE = 1024

Kind = Literal["run", "workflow"]


class SubscriptionIndex(Protocol):
    """How a subscription tells its bus which keys it now wants."""

    def add(self, kind: Kind, key: str, sub: Subscription) -> None: ...

    def remove(self, kind: Kind, key: str, sub: Subscription) -> None: ...


class Subscription:
    """A bounded queue of events for one listener, filtered by run or workflow ids.

    The queue is bounded and ``offer`` never waits: a consumer that stops reading can never
    slow the publisher (and so the runner, which publishes under its commit lock). When the
    queue is full the event is dropped and ``dropped`` is set; the connection owning the
    subscription then closes (WebSocket) or refills from the log (SSE).
    """

    def __init__(
        self, account_id: str, index: SubscriptionIndex | None = None, size: int | None = None
    ) -> None:
        self.account_id = account_id
        self.run_ids: set[str] = set()
        self.workflow_ids: set[str] = set()
        self.queue: asyncio.Queue[Event] = asyncio.Queue(size or QUEUE_SIZE)
        self.overflowed = False
        self.dropped = asyncio.Event()
        self._index = index

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
            self.dropped.set()

    def watch_run(self, run_id: str) -> None:
        self._change(self.run_ids, "run", run_id, add=True)

    def unwatch_run(self, run_id: str) -> None:
        self._change(self.run_ids, "run", run_id, add=False)

    def watch_workflow(self, workflow_id: str) -> None:
        self._change(self.workflow_ids, "workflow", workflow_id, add=True)

    def unwatch_workflow(self, workflow_id: str) -> None:
        self._change(self.workflow_ids, "workflow", workflow_id, add=False)

    def clear(self) -> None:
        for run_id in list(self.run_ids):
            self.unwatch_run(run_id)
        for workflow_id in list(self.workflow_ids):
            self.unwatch_workflow(workflow_id)

    def _change(self, keys: set[str], kind: Kind, key: str, *, add: bool) -> None:
        if add and key not in keys:
            keys.add(key)
            if self._index is not None:
                self._index.add(kind, key, self)
        elif not add and key in keys:
            keys.discard(key)
            if self._index is not None:
                self._index.remove(kind, key, self)


class EventBus(Protocol):
    async def publish(self, events: list[Event]) -> None: ...

    def subscribe(self, account_id: str) -> contextlib.AbstractContextManager[Subscription]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class MemoryBus:
    """In-process fan-out for the embedded default: subscriptions indexed by run and workflow
    id, so publishing costs a dict look-up per event however many listeners are connected."""

    def __init__(self, queue_size: int = QUEUE_SIZE) -> None:
        self.queue_size = queue_size
        self._subscriptions: set[Subscription] = set()
        self._by_key: dict[tuple[Kind, str], set[Subscription]] = {}

    @property
    def subscriber_count(self) -> int:
        return len(self._subscriptions)

    async def publish(self, events: list[Event]) -> None:
        self.deliver(events)

    def deliver(self, events: list[Event]) -> None:
        if not self._subscriptions:
            return
        by_key = self._by_key
        for event in events:
            by_run = by_key.get(("run", event.run_id))
            by_workflow = by_key.get(("workflow", event.workflow_id))
            if by_run and by_workflow:
                targets: set[Subscription] = by_run | by_workflow
            else:
                targets = by_run or by_workflow or set()
            for sub in targets:
                if sub.account_id == event.account_id:
                    sub.offer(event)

    # SubscriptionIndex
    def add(self, kind: Kind, key: str, sub: Subscription) -> None:
        self._by_key.setdefault((kind, key), set()).add(sub)

    def remove(self, kind: Kind, key: str, sub: Subscription) -> None:
        subs = self._by_key.get((kind, key))
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._by_key[(kind, key)]

    @contextlib.contextmanager
    def subscribe(self, account_id: str) -> Iterator[Subscription]:
        sub = Subscription(account_id, self, self.queue_size)
        self._subscriptions.add(sub)
        try:
            yield sub
        finally:
            sub.clear()
            self._subscriptions.discard(sub)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
