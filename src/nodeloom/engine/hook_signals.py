"""Waking a provider node when its provider's webhook has been kept (nodes/adapters/hooks.py,
api/routes/provider_hooks.py).

The webhook may land on any process (an API replica while a worker runs the node), so the
truth is the database: the route keeps what was delivered on the node run, committed, and
then publishes a signal on the event bus, which carries it to the process that runs the node
(in this process with the in-memory bus, to every process over Redis). The node's ``Waiter``
subscribed to its run before it read the node run, so a signal sent after that read is never
missed; it wakes and reads the node run again.

The signal is an ``Event`` of type ``provider.delivered`` with ``seq`` 0: never written to the
run's event log, and dropped by every stream that follows the run (they deliver only seqs past
what they have shown, and a run's events start at 1). With the polling bus (several processes
and no Redis) signals stay in their process: the waiter then also reads the node run every
``RECHECK_POLLING`` seconds, and every ``RECHECK`` seconds otherwise (a signal lost with a
Redis restart).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from nodeloom.db.models import utcnow
from nodeloom.events.bus import EventBus, Subscription
from nodeloom.events.links import PollingBus
from nodeloom.events.model import Event

SIGNAL = "provider.delivered"
RECHECK = 10.0  # seconds between reads of the node run while waiting for a webhook
RECHECK_POLLING = 1.0  # the same when the bus does not carry signals between processes


async def wake(
    bus: EventBus,
    account_id: str,
    workflow_id: str,
    run_id: str,
    node_id: str,
    signal_type: str = SIGNAL,
) -> None:
    """Tell the node waiting on ``run_id``/``node_id`` that its node run changed (or, with
    ``signal_type`` ``approval.decided``, that its approval was decided)."""
    signal = Event(signal_type, 0, utcnow(), run_id, workflow_id, account_id, node_id)
    await bus.publish([signal])


class Waiter:
    """One provider node's wait for signals; use ``with waiter(...)`` around its wait."""

    def __init__(
        self, sub: Subscription, node_id: str, recheck: float, signal_type: str = SIGNAL
    ) -> None:
        self.sub = sub
        self.node_id = node_id
        self.recheck = recheck
        self.signal_type = signal_type

    async def wait(self, most: float) -> bool:
        """Until a signal for this node arrives (True) or ``min(most, recheck)`` seconds pass
        (False). Other events of the run are read and dropped."""
        deadline = asyncio.get_running_loop().time() + max(0.0, min(most, self.recheck))
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            try:
                async with asyncio.timeout(left):
                    event = await self.sub.queue.get()
            except TimeoutError:
                return False
            if event.type == self.signal_type and event.node_id == self.node_id:
                return True


def recheck_of(bus: EventBus) -> float:
    """How often a waiting node must look at the database itself on ``bus``."""
    return RECHECK_POLLING if isinstance(bus, PollingBus) else RECHECK


@contextlib.contextmanager
def waiter(
    bus: EventBus,
    account_id: str,
    run_id: str,
    node_id: str,
    signal_type: str = SIGNAL,
    recheck: float | None = None,
) -> Iterator[Waiter]:
    """``recheck``: the longest single wait (default ``recheck_of(bus)``); ``math.inf`` for
    a node whose rechecks are done for it (engine/approval_watch.py)."""
    with bus.subscribe(account_id) as sub:
        sub.watch_run(run_id)
        yield Waiter(sub, node_id, recheck_of(bus) if recheck is None else recheck, signal_type)
