"""Replay-then-live, shared by the WebSocket and the SSE endpoints.

The race this module closes: a client subscribes while its run is producing events. If it read
the log first and then subscribed to the bus, an event committed in between would be in neither.
So a listener always subscribes to the bus FIRST, then reads the log (``replay``), then lets
each live event through ``admit``, which:

- drops an event whose seq it has already delivered (it was in the log *and* on the bus);
- delivers the next seq as is;
- on a jump (a lossy bus, or the first event seen of a run through a workflow subscription),
  fills the gap from the log before delivering, so a client sees seq 1..N of every run it is
  shown, in order, with no gaps and no duplicates.

Everything committed before the log read is in the log; everything committed after it is
published after the bus subscription existed, so it is in the queue. Events are published in
seq order per run (the runner publishes under its commit lock), so ``admit`` sees them in order.
"""

from __future__ import annotations

from collections import OrderedDict

from nodeloom.db.engine import Database
from nodeloom.db.models import RunEvent
from nodeloom.events.model import Event
from nodeloom.store import runs as run_store

FINISHED_MEMORY = 512  # finished runs remembered per listener, to drop late duplicates


def from_row(row: RunEvent, workflow_id: str, account_id: str) -> Event:
    return Event(
        type=row.type,
        seq=row.seq,
        ts=row.ts,
        run_id=row.run_id,
        workflow_id=workflow_id,
        account_id=account_id,
        node_id=row.node_id,
        data=row.data or {},
    )


async def read_log(
    db: Database, run_id: str, workflow_id: str, account_id: str, after_seq: int
) -> list[Event]:
    rows = await db.read(lambda c: run_store.events_after(c, run_id, after_seq))
    return [from_row(row, workflow_id, account_id) for row in rows]


class RunCursors:
    """Per listener: the last seq delivered of each run it has been shown."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._last: dict[str, int] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()

    def position(self, run_id: str) -> int:
        return self._last.get(run_id, 0)

    async def replay(
        self, run_id: str, workflow_id: str, account_id: str, after_seq: int = 0
    ) -> list[Event]:
        """The logged events of a run after ``after_seq``; the cursor moves past them."""
        self._finished.pop(run_id, None)
        self._last[run_id] = after_seq
        events = await read_log(self.db, run_id, workflow_id, account_id, after_seq)
        self._advance(run_id, events)
        return events

    async def admit(self, event: Event) -> list[Event]:
        """What to deliver, in order, now that ``event`` arrived live (maybe nothing)."""
        run_id = event.run_id
        if run_id in self._finished:
            return []
        last = self._last.get(run_id, 0)
        if event.seq <= last:
            return []
        if event.seq == last + 1:
            self._advance(run_id, [event])
            return [event]
        # A gap: everything up to event.seq is committed (it was published after commit).
        missing = await read_log(
            self.db, run_id, event.workflow_id, event.account_id, self._last.get(run_id, 0)
        )
        if run_id in self._finished or self._last.get(run_id, 0) != last:
            return []  # another caller moved this cursor while we read (not expected)
        if not missing or missing[-1].seq < event.seq:
            missing.append(event)
        self._advance(run_id, missing)
        return missing

    def forget(self, run_id: str) -> None:
        self._last.pop(run_id, None)

    def _advance(self, run_id: str, events: list[Event]) -> None:
        if not events:
            return
        self._last[run_id] = events[-1].seq
        if events[-1].is_final:
            # Nothing follows a final event: keep a small memory to drop duplicates, not a
            # cursor per run forever (a workflow subscription can see many runs).
            del self._last[run_id]
            self._finished[run_id] = None
            if len(self._finished) > FINISHED_MEMORY:
                self._finished.popitem(last=False)
