"""A batch that creates its run (``Batch.created``: accepting it): nobody else can see the run's
rows yet, so its transitions are folded into the rows it inserts, each checked against the
same from-states the UPDATEs name. ``created_alone`` writes such a run in one statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection, Dialect

import nodeloom.engine.transitions.statements as sql
from nodeloom.db.prepared import Params, Prepared, if_created
from nodeloom.engine import credits
from nodeloom.engine.transitions.changes import Batch, NewRun, WorkflowChanged
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
from nodeloom.states import NODE_FROM, NodeStatus, RunStatus, StaleTransition


def create(conn: Connection, batch: Batch, new: NewRun, rows: Rows) -> None:
    """Accepting a run: hold its estimate, insert it and its nodes as the batch leaves them.
    When the batch also ends the run, what the hold does not charge is given back in the
    same UPDATE (one statement for hold and release)."""
    for end in batch.ended:
        check_cached(conn, batch, end)
    statement, values = _created(batch, new, rows)
    inserted = statement.run(conn, values)
    if inserted.rowcount != 1:
        raise WorkflowChanged(batch.workflow_id)
    if new.parent_run_id is not None:
        sql.LINK_CHILD.run(
            conn,
            {"parent": new.parent_run_id, "node": new.parent_node_id, "child": batch.run_id},
        )
    if new.callback_url is not None:
        sql.INSERT_CALLBACK.run(conn, _callback_row(batch, new))


def _created(batch: Batch, new: NewRun, rows: Rows) -> tuple[Prepared, dict[str, Any]]:
    """The rows of a run ``batch`` creates, into ``rows`` (its nodes, artifacts, ledger and
    hold), and the INSERT of its run row with that statement's values."""
    assert not batch.added, "a run with batches is not executed while accepted"
    ended = batch.run_end
    release = ended[4] if ended is not None else 0
    rows.hold = (new.estimate, release)
    rows.ledger.append(ledger_row(batch, "", "hold", new.estimate, new.created_at))
    for end in batch.ended:
        end_rows(batch, end, rows)
    status, finished_at, error, used = RunStatus.RUNNING, None, None, 0
    if ended is not None:
        status, finished_at, error, used, _ = ended
        if release > 0:
            rows.ledger.append(ledger_row(batch, "", "release", release, finished_at))
    statement = sql.INSERT_RUN if new.graph_json is None else sql.INSERT_RETRY
    as_read = new.webhook_as_read
    values: dict[str, Any] = {
        "id": batch.run_id,
        "account_id": batch.account_id,
        "workflow_id": batch.workflow_id,
        "webhook_id": new.webhook_id,
        "status": status.value,
        "trigger": new.trigger,
        "use_cache": new.use_cache,
        "estimated_credits": new.estimate,
        "credits_used": used,
        "error": error,
        "created_at": new.created_at,
        "finished_at": finished_at,
        "cancel_requested": False,
        "driver": new.driver,
        "input": new.run_input,
        "retried_from": new.retried_from,
        "parent_run_id": new.parent_run_id,
        "parent_node_id": new.parent_node_id,
    }
    if new.graph_json is None:
        values["version"] = new.workflow_version
    else:
        values["graph_json"] = new.graph_json
        values["retry_version"] = new.retry_version
    if as_read is not None and new.graph_json is None:
        statement = sql.INSERT_WEBHOOK_RUN
        values.update(
            as_read_webhook=new.webhook_id,
            as_read_secret=as_read.secret_encrypted,
            as_read_callback=new.callback_url,
            as_read_plan=as_read.plan,
        )
    if new.nodes:  # an empty graph is valid: its run completes at once
        rows.nodes = _folded_nodes(batch, new)
    return statement, values


def _callback_row(batch: Batch, new: NewRun) -> dict[str, Any]:
    return {
        "id": batch.run_id,  # one delivery per run: the run's id is its webhook-id
        "run_id": batch.run_id,
        "account_id": batch.account_id,
        "url": new.callback_url,
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": new.created_at,
        "claimed_until": None,
        "created_at": new.created_at,
        "finished_at": None,
    }


def created_alone(
    dialect: Dialect,
    batch: Batch,
    next_seq: int,
    cache_keys: list[str],
    hits: Mapping[str, str] | None = None,
    also: Sequence[tuple[Prepared, Params | None]] = (),
) -> tuple[str, list[Any], list[Event]] | None:
    """The acceptance of the run ``batch`` creates as one PostgreSQL statement of its own,
    with the events it writes (numbered from ``next_seq``), or None when it cannot be one.

    The transaction it stands for is BEGIN, the look-up of the run's ``cache_keys``, the
    run's INSERT, the rest (``apply``) and COMMIT: five round trips. Here the run's INSERT
    makes the look-up's and the hold's checks itself and the rest is written only if it
    inserted its row (``prepared.if_created``): one round trip, and the same rows. When the
    statement answers that it inserted nothing (a changed workflow or webhook, a stored
    output, a balance short of the estimate) nothing was written, and the caller runs the
    transaction, which tells which and does what it always did. ``hits``: the artifact each
    cache hit of the batch reuses, by cache key, outputs known stored (engine/known_outputs.py):
    the run's INSERT checks that each is still the account's newest of its key, as the
    look-up would find it (ADR 0029). ``also``: more parts written only if the run's row is
    (``if_created``'s form): the hand-over of its queued nodes to queue workers and its
    Idempotency-Key (ADR 0035). A batch that needs more than rows inserted (a retry's
    graph, a sub-workflow's link, cache hits not in ``hits``) is not written this way."""
    new = batch.created
    hits = hits or {}
    reused = {end.artifact_id for end in batch.ended if end.cached}
    if (
        new is None
        or new.graph_json is not None
        or new.parent_run_id is not None
        or batch.also
        or not reused <= set(hits.values())
    ):
        return None
    rows = Rows()
    _, values = _created(batch, new, rows)
    keys = [key for key in dict.fromkeys(cache_keys) if key not in hits]
    statement = sql.insert_run_alone(new.webhook_as_read is not None, len(keys), len(hits))
    values.update((f"k{i}", key) for i, key in enumerate(keys))
    for i, (key, artifact_id) in enumerate(hits.items()):
        values.update({f"h{i}": key, f"a{i}": artifact_id})
    events = numbered(batch, next_seq) if batch.events else []
    assert rows.hold is not None  # ``_created`` sets it
    amount, give_back = rows.hold
    hold = {"account": batch.account_id, "amount": amount, "give_back": give_back}
    together = if_created(
        dialect,
        (statement, values),
        [
            *inserts(rows, events),
            (sql.INSERT_CALLBACK, _callback_row(batch, new) if new.callback_url else None),
            *also,
            (credits.HOLD_IF_CREATED, hold if amount > 0 else None),
        ],
    )
    return None if together is None else (*together, events)


def _folded_nodes(batch: Batch, new: NewRun) -> list[dict[str, Any]]:
    """The node rows of a run created by ``batch``, with the batch's transitions applied in
    the order ``_update`` applies them, each checked against its allowed from-states."""
    rows: dict[str, dict[str, Any]] = {}
    for position, (node_id, type_) in enumerate(new.nodes):
        queued = node_id in new.queued
        rows[node_id] = node_row(
            batch.run_id,
            node_id,
            position,
            None,
            type_,
            NodeStatus.QUEUED if queued else NodeStatus.PENDING,
            new.created_at if queued else None,
        )

    def move(node_id: str, to: NodeStatus, **values: Any) -> None:
        row = rows[node_id]
        if row["status"] not in NODE_FROM[to]:
            raise StaleTransition(
                f"run {batch.run_id}: node {node_id} cannot go from {row['status']} to {to}"
            )
        row.update(values, status=to)

    for node_id, at in batch.queued:
        move(node_id, NodeStatus.QUEUED, queued_at=at, started_at=None, claimed_by=None)
    for node_id, at in batch.started:
        attempts = rows[node_id]["attempts"] + 1
        move(
            node_id,
            NodeStatus.RUNNING,
            started_at=at,
            claimed_by=batch.claimed_by,
            attempts=attempts,
        )
    for end in batch.ended:
        move(
            end.node_id,
            end.status,
            finished_at=end.at,
            artifact_id=end.artifact_id,
            credits_used=end.credits,
            cached=end.cached,
            error=end.error,
            ports=end.ports,
        )
    for status, node_ids, at, error in batch.bulk:
        for node_id in node_ids:
            move(node_id, status, finished_at=at, error=error)
    for row in rows.values():
        row["status"] = row["status"].value
    return list(rows.values())
