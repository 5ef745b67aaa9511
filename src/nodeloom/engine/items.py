"""The cap on batch items in flight per account (``batch_items_in_flight_per_account``,
docs/batches.md, ADR 0013): across all of an account's running runs, at most that many item
instances (``x#k`` of a ForEach region, engine/batches.py) are queued or running at once.
``RunState.items_allowed`` tells a run how many it may have; the rest are held like the
items over their ForEach's ``concurrency``, and start as others end.

The room is shared between the account's runs: while other runs of the account wait for
room, a run may have at most its share (the cap divided by the runs wanting items, rounded
up) in flight, so a long batch does not keep a short one waiting until all its own items
have started; when no other run waits, a run may use all the room left.

- In-process driver (runner.py): ``AccountItems`` counts, per account, each driven run's
  items in flight in this process (and whether it holds items), and wakes the account's
  other drivers when a run's count goes down — a run whose items are all held has no node
  running, so nothing of its own would ever move it on. Counted per process: processes
  sharing one SQLite file each apply the cap to the runs they drive.
- Queue workers (steps.py): ``allowed_in_database`` counts the account's items queued or
  running in the database at every step that queues nodes, under a transaction-scoped
  advisory lock on the account (PostgreSQL), so two steps of the same account's runs count
  one after the other and the cap holds across every worker; the runs wanting items are the
  account's other running runs with item instances pending. A step that ended items of a
  full account names those runs (``held_runs``), and the worker gives each a step
  (``steps.nudge``) to queue what now fits; the reconciler does the same as a safety net.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import NodeRun, Run
from nodeloom.nodes.batch import FOR_EACH_ITEM
from nodeloom.nodes.loop import REPEAT_ITERATION
from nodeloom.states import NodeStatus, RunStatus

_RUNS = cast(sa.Table, Run.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)
# The engine's picks (an item's, an iteration's start) are not item instances.
_PICKS = (FOR_EACH_ITEM.spec.type, REPEAT_ITERATION.spec.type)


class AccountItems:
    """Per account, per run driven in this process: item instances queued or running; and
    an event per driver, set when room may have been freed for it."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._counts: dict[str, dict[str, int]] = {}
        self._wake: dict[str, dict[str, asyncio.Event]] = {}
        self._holding: dict[str, set[str]] = {}  # runs holding items, per account

    def join(self, account_id: str, run_id: str) -> asyncio.Event:
        """Register a driven run; the event it waits on for room."""
        event = asyncio.Event()
        self._wake.setdefault(account_id, {})[run_id] = event
        self._counts.setdefault(account_id, {})[run_id] = 0
        return event

    def leave(self, account_id: str, run_id: str) -> None:
        self.update(account_id, run_id, 0)
        self._holding.get(account_id, set()).discard(run_id)
        self._counts.get(account_id, {}).pop(run_id, None)
        self._wake.get(account_id, {}).pop(run_id, None)
        if not self._counts.get(account_id):
            self._counts.pop(account_id, None)
            self._wake.pop(account_id, None)
            self._holding.pop(account_id, None)

    def allowed(self, account_id: str, run_id: str) -> int:
        """How many items ``run_id`` may have in flight: the cap less the others', and at
        most its share while other runs of the account hold items."""
        counts = self._counts.get(account_id, {})
        others = sum(n for other, n in counts.items() if other != run_id)
        holding = self._holding.get(account_id, set())
        wanting = sum(
            1 for other, n in counts.items() if other != run_id and (n or other in holding)
        )
        waiting = any(other != run_id for other in holding)
        return room_of(self.cap, others, wanting if waiting else 0)

    def in_flight(self, account_id: str) -> int:
        return sum(self._counts.get(account_id, {}).values())

    def update(self, account_id: str, run_id: str, count: int, holding: bool = False) -> None:
        """``run_id`` has ``count`` items in flight now (and holds items, or not); fewer than
        before wakes the account's other drivers (one of them may start an item in the room
        freed)."""
        counts = self._counts.get(account_id)
        if counts is None or run_id not in counts:
            return
        if holding:
            self._holding.setdefault(account_id, set()).add(run_id)
        else:
            self._holding.get(account_id, set()).discard(run_id)
        before = counts[run_id]
        counts[run_id] = count
        if count < before:
            for other, event in self._wake.get(account_id, {}).items():
                if other != run_id:
                    event.set()


def room_of(cap: int, others: int, wanting: int) -> int:
    """Items a run may have in flight: ``cap`` less the ``others`` of the account's other
    runs, and, while ``wanting`` other runs want items too, at most its share of the cap."""
    room = max(0, cap - others)
    if not wanting:
        return room
    return min(room, -(-cap // (1 + wanting)))


def _lock_account(conn: Connection, account_id: str) -> None:
    if conn.dialect.name == "postgresql":
        key = zlib.crc32(f"batch-items:{account_id}".encode())
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def _items_of_account(account_id: str) -> sa.Select[int]:
    return (
        sa.select(sa.func.count())
        .select_from(_NODES.join(_RUNS, _RUNS.c.id == _NODES.c.run_id))
        .where(
            _RUNS.c.account_id == account_id,
            _RUNS.c.status == RunStatus.RUNNING.value,
            _NODES.c.item_index.is_not(None),
            _NODES.c.type.not_in(_PICKS),
            _NODES.c.status.in_([NodeStatus.QUEUED.value, NodeStatus.RUNNING.value]),
        )
    )


def allowed_in_database(
    conn: Connection, account_id: str, run_id: str, cap: int
) -> tuple[int, int]:
    """How many items ``run_id`` may have in flight (``room_of``: the account's other running
    runs' items queued or running as committed, and those of them with items pending), and
    the room the account had left apart from this run. Takes the account's lock first (held
    to the end of the transaction), so the steps of one account count in turn."""
    _lock_account(conn, account_id)
    others = int(
        conn.execute(_items_of_account(account_id).where(_NODES.c.run_id != run_id)).scalar_one()
        or 0
    )
    wanting = len(held_runs(conn, account_id, run_id))
    return room_of(cap, others, wanting), max(0, cap - others)


def held_runs(conn: Connection, account_id: str, run_id: str) -> list[str]:
    """The account's other running runs with item instances still pending: those that may
    hold items for want of room."""
    # Per run, the first pending item row found will do (EXISTS), not a count of them all.
    query = sa.select(_RUNS.c.id).where(
        _RUNS.c.account_id == account_id,
        _RUNS.c.status == RunStatus.RUNNING.value,
        _RUNS.c.id != run_id,
        _pending_items(),
    )
    return [str(r) for r in conn.execute(query).scalars()]


def _pending_items() -> sa.Exists:
    return sa.exists().where(
        _NODES.c.run_id == _RUNS.c.id,
        _NODES.c.item_index.is_not(None),
        _NODES.c.type.not_in(_PICKS),
        _NODES.c.status == NodeStatus.PENDING.value,
    )


def held_anywhere(conn: Connection) -> list[str]:
    """Running runs with pending item instances and no node queued or running: a run held
    by its account's cap whose wake-up was lost (the reconciler gives each a step). One
    look per running run (two EXISTS), not per pending row."""
    busy = sa.exists().where(
        _NODES.c.run_id == _RUNS.c.id,
        _NODES.c.status.in_([NodeStatus.QUEUED.value, NodeStatus.RUNNING.value]),
    )
    query = sa.select(_RUNS.c.id).where(
        _RUNS.c.status == RunStatus.RUNNING.value, _pending_items(), ~busy
    )
    return [str(r) for r in conn.execute(query).scalars()]
