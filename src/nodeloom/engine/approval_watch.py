"""One look at the database for all the approvals a process waits on.

A waiting Approval node (engine/approvals.py) wakes on a signal from the event bus when its
approval is decided. A signal can be lost (Redis restarted, or a polling bus that does not
carry signals between processes), so a waiting node must also look at its row now and then.
When every node read its own row every ``hook_signals.RECHECK`` seconds, 10,000 waiting nodes
were 1,000 reads a second: 29% of a core embedded, and scaled out enough load on PostgreSQL
that reads timed out. Instead, each process keeps one watch per database: every recheck
interval it asks, in one statement per ``CHUNK`` ids, which of the approvals it waits on are
no longer pending, and hands each such node its signal, as the bus would have. The watch's
task runs only while some node waits, and ends by itself when the last one leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Iterator
from functools import partial

from nodeloom.db.engine import Database
from nodeloom.events.bus import Subscription
from nodeloom.events.model import Event
from nodeloom.store import approvals as approval_store

log = logging.getLogger("nodeloom.approvals")

CHUNK = 1000  # ids per statement: far under SQLite's and asyncpg's limits on parameters


class ApprovalWatch:
    """The approvals this process waits on, looked at together every ``recheck`` seconds."""

    def __init__(self, db: Database, recheck: float) -> None:
        self._db = db
        self.recheck = recheck
        # approval id -> the waiting node's subscription and the signal it waits for
        self._waiting: dict[str, tuple[Subscription, Event]] = {}
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watching(self, approval_id: str, sub: Subscription, signal: Event) -> Iterator[None]:
        """While inside, ``signal`` is offered to ``sub`` once the approval is seen decided."""
        self._waiting[approval_id] = (sub, signal)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="approval-watch")
        try:
            yield
        finally:
            if self._waiting.get(approval_id, (None,))[0] is sub:
                del self._waiting[approval_id]

    async def _run(self) -> None:
        while self._waiting:
            await asyncio.sleep(self.recheck)
            ids = list(self._waiting)
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                try:
                    decided = await self._db.read(partial(approval_store.decided_among, ids=chunk))
                except Exception as exc:  # the next round looks again; the bus still wakes
                    log.warning("looking at %d waiting approvals failed: %r", len(chunk), exc)
                    continue
                for approval_id in decided:
                    waiting = self._waiting.get(approval_id)
                    if waiting is not None:
                        sub, signal = waiting
                        sub.offer(signal)


# One watch per database and event loop (tests run many loops in one process).
_WATCHES: weakref.WeakKeyDictionary[Database, dict[asyncio.AbstractEventLoop, ApprovalWatch]]
_WATCHES = weakref.WeakKeyDictionary()


def watch_of(db: Database, recheck: float) -> ApprovalWatch:
    """This loop's watch of ``db`` (made on first use)."""
    loop = asyncio.get_running_loop()
    per_loop = _WATCHES.setdefault(db, {})
    for stale in [other for other in per_loop if other.is_closed()]:
        del per_loop[stale]
    watch = per_loop.get(loop)
    if watch is None:
        watch = per_loop[loop] = ApprovalWatch(db, recheck)
    return watch
