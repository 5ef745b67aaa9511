"""Writing a batch in its transaction (``apply``): a step of a run that exists as conditional
UPDATEs naming their from-states, or a run it creates (create.py); then its rows and the
account's balance as one combined statement.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

import nodeloom.engine.transitions.statements as sql
from nodeloom.db.prepared import Prepared, run_together
from nodeloom.engine import credits
from nodeloom.engine.transitions.changes import AddedNode, Batch, NodeEnd
from nodeloom.engine.transitions.create import create
from nodeloom.engine.transitions.rows import (
    Rows,
    check_cached,
    end_rows,
    inserts,
    ledger_row,
    node_row,
    numbered,
)
from nodeloom.events.model import Event
from nodeloom.states import NodeStatus, StaleTransition


def apply(conn: Connection, batch: Batch, next_seq: int) -> list[Event]:
    """Write the batch; return its events with their seq (starting at ``next_seq``).
    Raises StaleTransition (the transaction rolls back) when a change no longer applies,
    InsufficientCredits or WorkflowChanged when a run it creates cannot be."""
    rows = Rows()
    if batch.created is not None:
        create(conn, batch, batch.created, rows)
    else:
        _update(conn, batch, rows)
    events = numbered(batch, next_seq) if batch.events else []
    # The rows the batch adds, then the account's balance, as one statement on PostgreSQL
    # (``run_together``): none of them reads another's rows. The balance is last: its row
    # stays locked from that UPDATE to COMMIT, and every run the account starts or ends
    # meanwhile waits for it. Written first, the lock was held across every insert, and one
    # account's webhook triggers were accepted one after another at the pace of those round
    # trips (docs/benchmarks.md, issue #20). All or nothing either way: refused credits roll
    # the inserts back too.
    parts: list[tuple[Prepared, Any]] = [*batch.also, *inserts(rows, events)]
    release = {"account": batch.account_id, "amount": rows.release}
    if rows.hold is not None and rows.hold[0] > 0:
        amount, give_back = rows.hold
        if run_together(conn, [*parts, credits.hold(batch.account_id, amount, give_back)]) != 1:
            credits.refuse(conn, batch.account_id, amount)
        if rows.release > 0:  # not in that statement: one row is updated once a statement
            credits.RELEASE.run(conn, release)
    else:
        run_together(conn, [*parts, (credits.RELEASE, release if rows.release > 0 else None)])
    return events


def _update(conn: Connection, batch: Batch, rows: Rows) -> None:
    """A step of a run that exists: conditional UPDATEs naming their from-states."""
    run_id = batch.run_id
    if batch.added:
        # First: the step may start and end some of them (a ForEach's item picks).
        sql.INSERT_NODES.run(conn, [_added_row(run_id, node) for node in batch.added])
    if batch.queued:
        ids = [node_id for node_id, _ in batch.queued]
        result = sql.QUEUE.run(conn, {"run": run_id, "ids": ids, "at": batch.queued[0][1]})
        if result.rowcount != len(ids):
            raise StaleTransition(f"run {run_id}: nodes {ids} were not all pending or running")
    # A node started and ended within this step is written once, not started then ended:
    # a chain of instant nodes is otherwise two UPDATEs a node (its starts each at its own
    # time), where one executemany per status does.
    ended = {end.node_id for end in batch.ended}
    started_at = dict(batch.started)
    _start(conn, batch, [(node_id, at) for node_id, at in batch.started if node_id not in ended])
    for end in batch.ended:
        check_cached(conn, batch, end)
        end_rows(batch, end, rows)
    for status in (NodeStatus.COMPLETED, NodeStatus.FAILED):
        of_status = [end for end in batch.ended if end.status == status]
        through = [end for end in of_status if end.node_id in started_at]
        _end(conn, batch, sql.THROUGH[status], through, started_at)
        _end(
            conn,
            batch,
            sql.END[status],
            [end for end in of_status if end.node_id not in started_at],
        )
    for status, node_ids, at, error in batch.bulk:
        sql.BULK[status].run(conn, {"run": run_id, "ids": node_ids, "at": at, "error": error})
    if batch.run_end is not None:
        _end_run(conn, batch, rows)


def _start(conn: Connection, batch: Batch, started: list[tuple[str, datetime]]) -> None:
    """Nodes started in this step that go on running (as tasks) after it."""
    for at, ids in _grouped_by_time(started):
        result = sql.START.run(
            conn, {"run": batch.run_id, "ids": ids, "at": at, "claimed_by": batch.claimed_by}
        )
        if result.rowcount != len(ids):
            raise StaleTransition(f"run {batch.run_id}: nodes {ids} were not all pending or queued")


def _end(
    conn: Connection,
    batch: Batch,
    statement: Prepared,
    ends: list[NodeEnd],
    started_at: dict[str, datetime] | None = None,
) -> None:
    """One conditional UPDATE per ended node (``started_at``: the nodes also started in this
    step, written by a ``sql.THROUGH`` statement); any that matches nothing is stale."""
    if not ends:
        return
    params = [_end_params(batch, end) for end in ends]
    if started_at is not None:
        for values, end in zip(params, ends, strict=True):
            values.update(started=started_at[end.node_id], claimed_by=batch.claimed_by)
    if _each_changed_rows(conn, statement, params) != len(ends):
        names = [end.node_id for end in ends]
        raise StaleTransition(f"run {batch.run_id}: nodes {names} cannot all end as recorded")


def _end_params(batch: Batch, end: NodeEnd) -> dict[str, Any]:
    return {
        "run": batch.run_id,
        "node": end.node_id,
        "at": end.at,
        "artifact": end.artifact_id,
        "credits": end.credits,
        "cached": end.cached,
        "error": end.error,
        "ports": end.ports,
    }


def _each_changed_rows(conn: Connection, statement: Prepared, params: list[dict[str, Any]]) -> int:
    """Rows changed by ``statement`` run once per parameter set. SQLite's driver runs them
    all in one call (a prepared statement, executemany) and sums the rows each changed;
    drivers that do not report that sum get one call each."""
    if conn.dialect.name == "sqlite":
        return int(statement.run(conn, params).rowcount)
    return sum(int(statement.run(conn, values).rowcount) for values in params)


def _added_row(run_id: str, node: AddedNode) -> dict[str, Any]:
    return node_row(
        run_id, node.node_id, node.position, node.item_index, node.type, NodeStatus.PENDING.value
    )


def _grouped_by_time(started: list[tuple[str, datetime]]) -> list[tuple[datetime, list[str]]]:
    """Nodes started at the same moment share one UPDATE (the usual case: one scheduling
    pass). Nodes started one after the other and ended in the same step (a chain of instant
    nodes) never come here: ``sql.THROUGH`` writes each with its own times."""
    groups: dict[datetime, list[str]] = {}
    for node_id, at in started:
        groups.setdefault(at, []).append(node_id)
    return list(groups.items())


def _end_run(conn: Connection, batch: Batch, rows: Rows) -> None:
    assert batch.run_end is not None
    status, at, error, credits_used, release = batch.run_end
    result = sql.RUN_END[status].run(
        conn, {"run": batch.run_id, "at": at, "error": error, "used": credits_used}
    )
    if result.rowcount != 1:
        raise StaleTransition(f"run {batch.run_id} is no longer running")
    if release > 0:
        rows.release += release
        rows.ledger.append(ledger_row(batch, "", "release", release, at))
