"""Every change of run and node state goes through here, as a ``Batch`` applied in one
transaction together with its artifact rows, credit-ledger rows and events.

An executor collects what one step of a run changed (nodes finished, nodes started, the run
ended) into a batch, so a step costs one commit however many transitions it holds. Events
get their ``seq`` when the batch is applied, numbered on from the run's last seq
(engine/stepper.py says where that comes from and why no two writers of one run overlap),
so the log has no gaps and commit order equals ``seq`` order.

A batch may also create its run (``Batch.created``: accepting it). Then nobody else can see
the run's rows yet, so instead of inserting them pending and updating them, the batch's
transitions are folded into the rows it inserts: one multi-row INSERT per table whatever
the batch holds. The folding checks each transition against the same allowed from-states
(``states.NODE_FROM``) the conditional UPDATEs name. A run of instant nodes is accepted,
executed and finished this way in one transaction (engine/submit.py).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from nodeloom.db.models import (
    Account,
    Artifact,
    CallbackDelivery,
    CreditEntry,
    NodeRun,
    Run,
    RunEvent,
    Webhook,
    Workflow,
)
from nodeloom.db.prepared import Prepared, if_created, run_together
from nodeloom.engine import credits
from nodeloom.events.model import Event, EventType
from nodeloom.states import (
    FINISHED_RUN_STATES,
    NODE_FROM,
    RUN_FROM,
    NodeStatus,
    RunStatus,
    StaleTransition,
)


@dataclass(frozen=True)
class NewArtifact:
    id: str
    content_type: str
    size_bytes: int
    sha256: str
    width: int | None
    height: int | None
    duration_ms: int | None
    # The bytes of a small text artifact, kept in its row (engine/executor.py
    # INLINE_TEXT_BYTES); None when they are in the artifact store.
    data: bytes | None = None


@dataclass
class _NodeEnd:
    node_id: str
    status: NodeStatus
    at: datetime
    artifact_id: str | None = None
    new_artifact: NewArtifact | None = None
    credits: int = 0
    cached: bool = False
    cache_key: str | None = None
    error: dict[str, Any] | None = None
    ports: list[str] | None = None  # the outputs a node with branches took


@dataclass(frozen=True)
class NewRun:
    """A run the batch creates: its row and its node rows (in graph order), pending, or
    queued for the roots when queue workers run its nodes."""

    webhook_id: str | None
    trigger: str
    use_cache: bool
    estimate: int
    created_at: datetime
    driver: str | None
    run_input: dict[str, Any] | None
    # The workflow as it was read (``updated_at``): the run copies that graph, and the
    # INSERT finds nothing if the workflow changed or was deleted since (WorkflowChanged).
    workflow_version: datetime
    nodes: tuple[tuple[str, str], ...]  # (node id, type)
    queued: frozenset[str] = frozenset()
    # A retry (engine/retry.py): the run it retries, and the graph it runs — that run's
    # copy with the retry's params — instead of the workflow's current one.
    retried_from: str | None = None
    graph_json: dict[str, Any] | None = None
    # Where the run reports when it ends: its callback delivery is written with the run, so
    # it cannot be lost between the run ending and someone noticing (engine/callbacks.py).
    callback_url: str | None = None
    # A sub-workflow's run: the run and node that started it; that node run is linked back
    # (``child_run_id``) in the same transaction (engine/subworkflows.py).
    parent_run_id: str | None = None
    parent_node_id: str | None = None
    # A webhook trigger's run: inserted only while its webhook is still as the trigger
    # read it (else WorkflowChanged, as for a changed workflow).
    webhook_as_read: WebhookAsRead | None = None


@dataclass(frozen=True)
class WebhookAsRead:
    """What a webhook trigger was checked against, besides the workflow's version: the run's
    INSERT finds nothing unless the webhook (``NewRun.webhook_id``) is still active and not
    deleted, with this signing secret and the run's callback URL, and its owner still has
    this plan and is not disabled. A trigger may then check a webhook it remembers from an
    earlier trigger without reading it again (store/webhooks.py, ``TriggerTargets``)."""

    plan: str
    secret_encrypted: str | None


@dataclass(frozen=True)
class AddedNode:
    """A node row added to a running run, pending: an item of a ForEach."""

    node_id: str  # the instance id, ``<node id>#<item>``
    type: str
    position: int  # the drawn node's
    item_index: int


class WorkflowChanged(Exception):
    """The workflow was updated or deleted between reading it and creating its run."""


@dataclass
class Batch:
    run_id: str
    workflow_id: str
    account_id: str
    created: NewRun | None = None
    started: list[tuple[str, datetime]] = field(default_factory=list)
    claimed_by: str | None = None  # who the started nodes are claimed by
    ended: list[_NodeEnd] = field(default_factory=list)
    bulk: list[tuple[NodeStatus, list[str], datetime, dict[str, Any] | None]] = field(
        default_factory=list
    )
    queued: list[tuple[str, datetime]] = field(default_factory=list)
    run_end: tuple[RunStatus, datetime, dict[str, Any] | None, int, int] | None = None
    events: list[tuple[str, str | None, dict[str, Any], datetime]] = field(default_factory=list)
    # Node rows this step adds: a ForEach's items (engine/batches.py), pending.
    added: list[AddedNode] = field(default_factory=list)
    # Instance id -> (drawn node id, item index, item count), for the run's batches: their
    # events name the drawn node and carry the item index and count (a watcher shows 17/40).
    items: Mapping[str, tuple[str, int, int]] = field(default_factory=dict)
    # Statements of the caller's, sent with the batch's rows (one statement on PostgreSQL,
    # ``apply``): the acceptance's hand-over of its queued nodes (queue jobs).
    also: list[tuple[Prepared, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.created
            or self.added
            or self.started
            or self.ended
            or self.bulk
            or self.queued
            or self.run_end
            or self.events
        )

    def event(
        self, type_: EventType, at: datetime, node_id: str | None = None, **data: Any
    ) -> None:
        item = self.items.get(node_id) if node_id is not None else None
        if item is not None:
            node_id, data["item_index"], data["item_count"] = item
        self.events.append((type_, node_id, data, at))

    def add_nodes(self, nodes: list[AddedNode]) -> None:
        self.added.extend(nodes)

    def start_node(self, node_id: str, at: datetime, claimed_by: str) -> None:
        """Claimed by ``claimed_by`` (one claimant per batch) and started."""
        assert self.claimed_by in (None, claimed_by), "one claimant per batch"
        self.claimed_by = claimed_by
        self.started.append((node_id, at))
        self.event(EventType.NODE_STARTED, at, node_id)

    def complete_node(
        self,
        node_id: str,
        at: datetime,
        *,
        artifact_id: str,
        new_artifact: NewArtifact | None,
        credits: int,
        cached: bool,
        cache_key: str | None,
        ports: tuple[str, ...] | None = None,
    ) -> None:
        self.ended.append(
            _NodeEnd(
                node_id,
                NodeStatus.COMPLETED,
                at,
                artifact_id=artifact_id,
                new_artifact=new_artifact,
                credits=credits,
                cached=cached,
                cache_key=cache_key,
                ports=list(ports) if ports is not None else None,
            )
        )
        data: dict[str, Any] = {}
        if ports is not None:
            data["outputs"] = list(ports)
        self.event(
            EventType.NODE_COMPLETED,
            at,
            node_id,
            artifact_id=artifact_id,
            credits_used=credits,
            cached=cached,
            **data,
        )

    def fail_node(
        self,
        node_id: str,
        at: datetime,
        error: dict[str, Any],
        error_artifact: NewArtifact | None = None,
    ) -> None:
        """Failed; ``error_artifact``: the error as JSON, sent down the node's ``error``
        output (the node's artifact, the run going on)."""
        artifact_id = error_artifact.id if error_artifact is not None else None
        self.ended.append(
            _NodeEnd(
                node_id,
                NodeStatus.FAILED,
                at,
                error=error,
                artifact_id=artifact_id,
                new_artifact=error_artifact,
            )
        )
        data: dict[str, Any] = {"error": error}
        if artifact_id is not None:
            data["artifact_id"] = artifact_id
            data["outputs"] = ["error"]
        self.event(EventType.NODE_FAILED, at, node_id, **data)

    def skip_nodes(
        self,
        node_ids: list[str],
        at: datetime,
        because: str,
        reason: dict[str, Any] | None = None,
    ) -> None:
        """Skipped: an upstream node ``because`` failed, or (``reason``) for another reason
        (a branch not taken)."""
        if node_ids:
            reason = reason or {
                "code": "upstream_failed",
                "message": f"upstream node {because} failed",
            }
            self.bulk.append((NodeStatus.SKIPPED, node_ids, at, reason))
            for node_id in node_ids:
                self.event(EventType.NODE_SKIPPED, at, node_id, reason=reason)

    def cancel_nodes(self, node_ids: list[str], at: datetime) -> None:
        if node_ids:
            self.bulk.append((NodeStatus.CANCELLED, node_ids, at, None))
            for node_id in node_ids:
                self.event(EventType.NODE_CANCELLED, at, node_id)

    def queue_nodes(self, node_ids: list[str], at: datetime) -> None:
        """Runnable now (from pending), or again (from running: the process that ran them
        died). No event: nothing started or finished; the run status shows ``queued``."""
        self.queued.extend((node_id, at) for node_id in node_ids)

    def finish_run(
        self,
        status: RunStatus,
        at: datetime,
        error: dict[str, Any] | None,
        *,
        credits_used: int,
        release: int,
        duration_ms: int,
    ) -> None:
        self.run_end = (status, at, error, credits_used, release)
        data: dict[str, Any] = {"credits_used": credits_used, "duration_ms": duration_ms}
        if error is not None:
            data["error"] = error
        self.event(EventType.ended(status), at, None, **data)


def _t(model: type[Any]) -> sa.Table:
    table: sa.Table = model.__table__
    return table


def _from(status: NodeStatus) -> list[str]:
    return [s.value for s in NODE_FROM[status]]


# Statements are built once: building a statement costs more than executing it.
_NODE = _t(NodeRun)
_RUN = _t(Run)
_ACCOUNT = _t(Account)
_LEDGER = _t(CreditEntry)
_ARTIFACT = _t(Artifact)
_EVENTS = _t(RunEvent)
_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)

_QUEUE = Prepared(
    sa.update(_NODE)
    .where(
        _NODE.c.run_id == sa.bindparam("run"),
        _NODE.c.node_id.in_(_IDS),
        _NODE.c.status.in_(_from(NodeStatus.QUEUED)),
    )
    .values(
        status=NodeStatus.QUEUED.value,
        queued_at=sa.bindparam("at", type_=_NODE.c.queued_at.type),
        started_at=None,
        claimed_by=None,
    )
)
_START = Prepared(
    sa.update(_NODE)
    .where(
        _NODE.c.run_id == sa.bindparam("run"),
        _NODE.c.node_id.in_(_IDS),
        _NODE.c.status.in_(_from(NodeStatus.RUNNING)),
    )
    .values(
        status=NodeStatus.RUNNING.value,
        started_at=sa.bindparam("at", type_=_NODE.c.started_at.type),
        claimed_by=sa.bindparam("claimed_by"),
        attempts=_NODE.c.attempts + 1,
    )
)


def _end_values(status: NodeStatus) -> dict[str, Any]:
    return {
        "status": status.value,
        "finished_at": sa.bindparam("at", type_=_NODE.c.finished_at.type),
        "artifact_id": sa.bindparam("artifact"),
        "credits_used": sa.bindparam("credits"),
        "cached": sa.bindparam("cached"),
        "error": sa.bindparam("error", type_=_NODE.c.error.type),
        "ports": sa.bindparam("ports", type_=_NODE.c.ports.type),
    }


def _one_node(from_states: list[str]) -> Any:
    """One node row in one of ``from_states``. The states are bound one by one, not as an
    expanding IN list: these statements run as executemany, which takes its SQL as is."""
    return (
        _NODE.c.run_id == sa.bindparam("run"),
        _NODE.c.node_id == sa.bindparam("node"),
        _NODE.c.status.in_([sa.literal(state) for state in from_states]),
    )


def _end_statement(status: NodeStatus) -> Prepared:
    return Prepared(sa.update(_NODE).where(*_one_node(_from(status))).values(**_end_values(status)))


def _through_from(status: NodeStatus) -> list[str]:
    """The states a node may be in to be started and then end in ``status``: those a start
    may leave, as long as ``status`` may follow running."""
    assert NodeStatus.RUNNING in NODE_FROM[status], f"{status} cannot follow running"
    return _from(NodeStatus.RUNNING)


def _through_statement(status: NodeStatus) -> Prepared:
    """Started and ended within one step (an instant node, a cache hit): both transitions
    in one UPDATE, checked against the from-states of the first."""
    return Prepared(
        sa.update(_NODE)
        .where(*_one_node(_through_from(status)))
        .values(
            started_at=sa.bindparam("started", type_=_NODE.c.started_at.type),
            claimed_by=sa.bindparam("claimed_by"),
            attempts=_NODE.c.attempts + 1,
            **_end_values(status),
        )
    )


def _bulk_statement(status: NodeStatus) -> Prepared:
    return Prepared(
        sa.update(_NODE)
        .where(
            _NODE.c.run_id == sa.bindparam("run"),
            _NODE.c.node_id.in_(_IDS),
            _NODE.c.status.in_(_from(status)),
        )
        .values(
            status=status.value,
            finished_at=sa.bindparam("at", type_=_NODE.c.finished_at.type),
            error=sa.bindparam("error", type_=_NODE.c.error.type),
        )
    )


_END = {status: _end_statement(status) for status in (NodeStatus.COMPLETED, NodeStatus.FAILED)}
_THROUGH = {
    status: _through_statement(status) for status in (NodeStatus.COMPLETED, NodeStatus.FAILED)
}
_BULK = {status: _bulk_statement(status) for status in (NodeStatus.SKIPPED, NodeStatus.CANCELLED)}


def _run_end_statement(status: RunStatus) -> Prepared:
    return Prepared(
        sa.update(_RUN)
        .where(
            _RUN.c.id == sa.bindparam("run"), _RUN.c.status.in_([s.value for s in RUN_FROM[status]])
        )
        .values(
            status=status.value,
            finished_at=sa.bindparam("at", type_=_RUN.c.finished_at.type),
            error=sa.bindparam("error", type_=_RUN.c.error.type),
            credits_used=sa.bindparam("used"),
        )
    )


_RUN_END = {status: _run_end_statement(status) for status in FINISHED_RUN_STATES}
_INSERT_LEDGER = Prepared(sa.insert(_LEDGER))
_INSERT_NODES = Prepared(sa.insert(_NODE))
_WORKFLOW = _t(Workflow)
_NEW_RUN_VALUES = (
    "id",
    "account_id",
    "workflow_id",
    "webhook_id",
    "status",
    "trigger",
    "use_cache",
    "estimated_credits",
    "credits_used",
    "error",
    "created_at",
    "finished_at",
    "cancel_requested",
    "driver",
    "input",
    "retried_from",
    "parent_run_id",
    "parent_node_id",
)


def _insert_run_statement(*also: sa.ColumnElement[bool]) -> sa.Insert:
    """The run row with a copy of the workflow's graph and its version number, only if the
    workflow is still the version that was read (and not deleted) and ``also`` holds: the
    checks and the copy in one statement."""
    return sa.insert(_RUN).from_select(
        [*_NEW_RUN_VALUES, "graph_json", "workflow_version"],
        sa.select(
            *(sa.bindparam(name, type_=_RUN.c[name].type) for name in _NEW_RUN_VALUES),
            _WORKFLOW.c.graph_json,
            _WORKFLOW.c.version,
        ).where(
            _WORKFLOW.c.id == sa.bindparam("workflow_id"),
            _WORKFLOW.c.account_id == sa.bindparam("account_id"),
            _WORKFLOW.c.updated_at == sa.bindparam("version", type_=_WORKFLOW.c.updated_at.type),
            _WORKFLOW.c.deleted_at.is_(None),
            *also,
        ),
    )


_INSERT_RUN = Prepared(_insert_run_statement())
_WEBHOOK = _t(Webhook)
# A webhook trigger's run row: as _INSERT_RUN, and only while the webhook is as it was read
# (WebhookAsRead): every check of a trigger that the database could have changed since is
# made again here, in the statement that creates the run.
_WEBHOOK_AS_READ = (
    sa.exists().where(
        _WEBHOOK.c.id == sa.bindparam("as_read_webhook"),
        _WEBHOOK.c.workflow_id == _WORKFLOW.c.id,
        _WEBHOOK.c.active.is_(True),
        _WEBHOOK.c.deleted_at.is_(None),
        _WEBHOOK.c.secret_encrypted.is_not_distinct_from(
            sa.bindparam("as_read_secret", type_=_WEBHOOK.c.secret_encrypted.type)
        ),
        _WEBHOOK.c.callback_url.is_not_distinct_from(
            sa.bindparam("as_read_callback", type_=_WEBHOOK.c.callback_url.type)
        ),
    ),
    sa.exists().where(
        _ACCOUNT.c.id == _WORKFLOW.c.account_id,
        _ACCOUNT.c.plan == sa.bindparam("as_read_plan", type_=_ACCOUNT.c.plan.type),
        _ACCOUNT.c.disabled_at.is_(None),
    ),
)
_INSERT_WEBHOOK_RUN = Prepared(_insert_run_statement(*_WEBHOOK_AS_READ))
# The run row of an acceptance written in one statement (``created_alone``), which also
# makes the two checks the transaction makes with statements of their own: no output of
# the run is stored already (its cache keys ``k0``..``kN``: one index probe each, as the
# transaction's look-up; ``= ANY(array)`` left PostgreSQL's generic plan scanning every
# artifact of the account), and the balance covers the estimate as of the statement's start
# (the hold itself is checked again on the locked row, ``credits.HOLD_IF_CREATED``). Either
# failing inserts nothing; the transaction then does what it does (reuses the outputs,
# refuses with 402).
_COVERED = sa.exists().where(
    credits.BALANCES.c.account_id == sa.bindparam("account_id"),
    credits.BALANCES.c.credits_balance >= sa.bindparam("estimated_credits"),
)


def _none_stored(index: int) -> sa.ColumnElement[bool]:
    return ~sa.exists().where(
        _ARTIFACT.c.account_id == sa.bindparam("account_id"),
        _ARTIFACT.c.cache_key.is_not(None),  # the index's condition
        _ARTIFACT.c.cache_key == sa.bindparam(f"k{index}", type_=_ARTIFACT.c.cache_key.type),
    )


def _still_newest(index: int) -> sa.ColumnElement[bool]:
    """The artifact ``a<index>`` is still the account's newest of key ``h<index>``: the one
    the look-up would find (one index probe), for an output known stored (ADR 0029)."""
    newest = (
        sa.select(_ARTIFACT.c.id)
        .where(
            _ARTIFACT.c.account_id == sa.bindparam("account_id"),
            _ARTIFACT.c.cache_key.is_not(None),  # the index's condition
            _ARTIFACT.c.cache_key == sa.bindparam(f"h{index}", type_=_ARTIFACT.c.cache_key.type),
        )
        .order_by(_ARTIFACT.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    return newest == sa.bindparam(f"a{index}", type_=_ARTIFACT.c.id.type)


@functools.cache
def _insert_run_alone(webhook: bool, keys: int, hits: int = 0) -> Prepared:
    also = _WEBHOOK_AS_READ if webhook else ()
    return Prepared(
        _insert_run_statement(
            *also,
            *(_none_stored(i) for i in range(keys)),
            *(_still_newest(i) for i in range(hits)),
            _COVERED,
        )
    )


# A retry's run row with its own graph, only if the workflow still exists (its version does
# not matter: a retry runs the graph of the run it retries).
_INSERT_RETRY = Prepared(
    sa.insert(_RUN).from_select(
        [*_NEW_RUN_VALUES, "graph_json"],
        sa.select(
            *(sa.bindparam(name, type_=_RUN.c[name].type) for name in _NEW_RUN_VALUES),
            sa.bindparam("graph_json", type_=_RUN.c.graph_json.type),
        ).where(
            _WORKFLOW.c.id == sa.bindparam("workflow_id"),
            _WORKFLOW.c.account_id == sa.bindparam("account_id"),
            _WORKFLOW.c.deleted_at.is_(None),
        ),
    )
)
# A sub-workflow's run, linked from the node run that started it.
_LINK_CHILD = Prepared(
    sa.update(_NODE)
    .where(_NODE.c.run_id == sa.bindparam("parent"), _NODE.c.node_id == sa.bindparam("node"))
    .values(child_run_id=sa.bindparam("child"))
)
_ARTIFACT_EXISTS = Prepared(sa.select(_ARTIFACT.c.id).where(_ARTIFACT.c.id == sa.bindparam("id")))
_INSERT_ARTIFACT = Prepared(sa.insert(_ARTIFACT))
_INSERT_EVENTS = Prepared(sa.insert(_EVENTS))
_INSERT_CALLBACK = Prepared(sa.insert(_t(CallbackDelivery)))


def apply(conn: Connection, batch: Batch, next_seq: int) -> list[Event]:
    """Write the batch; return its events with their seq (starting at ``next_seq``).
    Raises StaleTransition (the transaction rolls back) when a change no longer applies,
    InsufficientCredits or WorkflowChanged when a run it creates cannot be."""
    rows = _Rows()
    if batch.created is not None:
        _create(conn, batch, batch.created, rows)
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
    parts: list[tuple[Prepared, Any]] = [*batch.also, *_inserts(rows, events)]
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


def _inserts(rows: _Rows, events: list[Event]) -> list[tuple[Prepared, Any]]:
    """The rows a batch adds, as the parts of a combined statement (``apply``'s and
    ``created_alone``'s)."""
    return [
        (_INSERT_NODES, rows.nodes),
        (_INSERT_ARTIFACT, rows.artifacts),
        # Unique (run, node, kind): a second charge for the same node fails loudly.
        (_INSERT_LEDGER, rows.ledger),
        (_INSERT_EVENTS, [_event_row(e) for e in events]),
    ]


@dataclass
class _Rows:
    """Rows a batch adds, inserted once per table."""

    ledger: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)  # of a run created
    # Balance changes, made last (``apply``): a new run's hold (amount, given back at once),
    # an ended run's release.
    hold: tuple[int, int] | None = None
    release: int = 0


def _update(conn: Connection, batch: Batch, rows: _Rows) -> None:
    """A step of a run that exists: conditional UPDATEs naming their from-states."""
    run_id = batch.run_id
    if batch.added:
        # First: the step may start and end some of them (a ForEach's item picks).
        _INSERT_NODES.run(conn, [_added_row(run_id, node) for node in batch.added])
    if batch.queued:
        ids = [node_id for node_id, _ in batch.queued]
        result = _QUEUE.run(conn, {"run": run_id, "ids": ids, "at": batch.queued[0][1]})
        if result.rowcount != len(ids):
            raise StaleTransition(f"run {run_id}: nodes {ids} were not all pending or running")
    # A node started and ended within this step is written once, not started then ended:
    # a chain of instant nodes is otherwise two UPDATEs a node (its starts each at its own
    # time), where one executemany per status does.
    ended = {end.node_id for end in batch.ended}
    started_at = dict(batch.started)
    _start(conn, batch, [(node_id, at) for node_id, at in batch.started if node_id not in ended])
    for end in batch.ended:
        _check_cached(conn, batch, end)
        _end_rows(batch, end, rows)
    for status in (NodeStatus.COMPLETED, NodeStatus.FAILED):
        of_status = [end for end in batch.ended if end.status == status]
        through = [end for end in of_status if end.node_id in started_at]
        _end(conn, batch, _THROUGH[status], through, started_at)
        _end(conn, batch, _END[status], [end for end in of_status if end.node_id not in started_at])
    for status, node_ids, at, error in batch.bulk:
        _BULK[status].run(conn, {"run": run_id, "ids": node_ids, "at": at, "error": error})
    if batch.run_end is not None:
        _end_run(conn, batch, rows)


def _start(conn: Connection, batch: Batch, started: list[tuple[str, datetime]]) -> None:
    """Nodes started in this step that go on running (as tasks) after it."""
    for at, ids in _grouped_by_time(started):
        result = _START.run(
            conn, {"run": batch.run_id, "ids": ids, "at": at, "claimed_by": batch.claimed_by}
        )
        if result.rowcount != len(ids):
            raise StaleTransition(f"run {batch.run_id}: nodes {ids} were not all pending or queued")


def _end(
    conn: Connection,
    batch: Batch,
    statement: Prepared,
    ends: list[_NodeEnd],
    started_at: dict[str, datetime] | None = None,
) -> None:
    """One conditional UPDATE per ended node (``started_at``: the nodes also started in this
    step, written by a ``_THROUGH`` statement); any that matches nothing is stale."""
    if not ends:
        return
    params = [_end_params(batch, end) for end in ends]
    if started_at is not None:
        for values, end in zip(params, ends, strict=True):
            values.update(started=started_at[end.node_id], claimed_by=batch.claimed_by)
    if _each_changed_rows(conn, statement, params) != len(ends):
        names = [end.node_id for end in ends]
        raise StaleTransition(f"run {batch.run_id}: nodes {names} cannot all end as recorded")


def _end_params(batch: Batch, end: _NodeEnd) -> dict[str, Any]:
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


def _create(conn: Connection, batch: Batch, new: NewRun, rows: _Rows) -> None:
    """Accepting a run: hold its estimate, insert it and its nodes as the batch leaves them.
    When the batch also ends the run, what the hold does not charge is given back in the
    same UPDATE (one statement for hold and release)."""
    for end in batch.ended:
        _check_cached(conn, batch, end)
    statement, values = _created(batch, new, rows)
    inserted = statement.run(conn, values)
    if inserted.rowcount != 1:
        raise WorkflowChanged(batch.workflow_id)
    if new.parent_run_id is not None:
        _LINK_CHILD.run(
            conn,
            {"parent": new.parent_run_id, "node": new.parent_node_id, "child": batch.run_id},
        )
    if new.callback_url is not None:
        _INSERT_CALLBACK.run(conn, _callback_row(batch, new))


def _created(batch: Batch, new: NewRun, rows: _Rows) -> tuple[Prepared, dict[str, Any]]:
    """The rows of a run ``batch`` creates, into ``rows`` (its nodes, artifacts, ledger and
    hold), and the INSERT of its run row with that statement's values."""
    assert not batch.added, "a run with batches is not executed while accepted"
    ended = batch.run_end
    release = ended[4] if ended is not None else 0
    rows.hold = (new.estimate, release)
    rows.ledger.append(_ledger_row(batch, "", "hold", new.estimate, new.created_at))
    for end in batch.ended:
        _end_rows(batch, end, rows)
    status, finished_at, error, used = RunStatus.RUNNING, None, None, 0
    if ended is not None:
        status, finished_at, error, used, _ = ended
        if release > 0:
            rows.ledger.append(_ledger_row(batch, "", "release", release, finished_at))
    statement = _INSERT_RUN if new.graph_json is None else _INSERT_RETRY
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
    if as_read is not None and new.graph_json is None:
        statement = _INSERT_WEBHOOK_RUN
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
    look-up would find it (ADR 0029). A batch that needs more than rows inserted (a retry's
    graph, a sub-workflow's link, cache hits not in ``hits``, a hand-over to queue workers)
    is not written this way."""
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
    rows = _Rows()
    _, values = _created(batch, new, rows)
    keys = [key for key in dict.fromkeys(cache_keys) if key not in hits]
    statement = _insert_run_alone(new.webhook_as_read is not None, len(keys), len(hits))
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
            *_inserts(rows, events),
            (_INSERT_CALLBACK, _callback_row(batch, new) if new.callback_url else None),
            (credits.HOLD_IF_CREATED, hold if amount > 0 else None),
        ],
    )
    return None if together is None else (*together, events)


def _added_row(run_id: str, node: AddedNode) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "node_id": node.node_id,
        "position": node.position,
        "item_index": node.item_index,
        "type": node.type,
        "status": NodeStatus.PENDING.value,
        "artifact_id": None,
        "credits_used": 0,
        "cached": False,
        "started_at": None,
        "finished_at": None,
        "error": None,
        "attempts": 0,
        "claimed_by": None,
        "queued_at": None,
        "ports": None,
    }


def _folded_nodes(batch: Batch, new: NewRun) -> list[dict[str, Any]]:
    """The node rows of a run created by ``batch``, with the batch's transitions applied in
    the order ``_update`` applies them, each checked against its allowed from-states."""
    rows: dict[str, dict[str, Any]] = {}
    for position, (node_id, type_) in enumerate(new.nodes):
        queued = node_id in new.queued
        rows[node_id] = {
            "run_id": batch.run_id,
            "node_id": node_id,
            "position": position,
            "item_index": None,
            "type": type_,
            "status": NodeStatus.QUEUED if queued else NodeStatus.PENDING,
            "artifact_id": None,
            "credits_used": 0,
            "cached": False,
            "started_at": None,
            "finished_at": None,
            "error": None,
            "attempts": 0,
            "claimed_by": None,
            "queued_at": new.created_at if queued else None,
            "ports": None,
        }

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


def _grouped_by_time(started: list[tuple[str, datetime]]) -> list[tuple[datetime, list[str]]]:
    """Nodes started at the same moment share one UPDATE (the usual case: one scheduling
    pass). Nodes started one after the other and ended in the same step (a chain of instant
    nodes) never come here: ``_THROUGH`` writes each with its own times."""
    groups: dict[datetime, list[str]] = {}
    for node_id, at in started:
        groups.setdefault(at, []).append(node_id)
    return list(groups.items())


def _check_cached(conn: Connection, batch: Batch, end: _NodeEnd) -> None:
    """A cache hit reuses another run's artifact: make sure retention did not remove it since
    the look-up (the step then rolls back and the run is resumed without it)."""
    if end.cached and end.artifact_id is not None:
        if _ARTIFACT_EXISTS.run(conn, {"id": end.artifact_id}).first() is None:
            raise StaleTransition(f"run {batch.run_id}: cached artifact {end.artifact_id} gone")


def _ledger_row(batch: Batch, node_id: str, kind: str, amount: int, at: datetime) -> dict[str, Any]:
    return {
        "account_id": batch.account_id,
        "run_id": batch.run_id,
        "node_id": node_id,
        "kind": kind,
        "amount": amount,
        "note": None,
        "created_at": at,
    }


def _end_rows(batch: Batch, end: _NodeEnd, rows: _Rows) -> None:
    """What a node's end adds: its new artifact (with the cache key it answers), its charge."""
    if end.new_artifact is not None:
        art = end.new_artifact
        rows.artifacts.append(
            {
                "id": art.id,
                "account_id": batch.account_id,
                "run_id": batch.run_id,
                "workflow_id": batch.workflow_id,
                "node_id": end.node_id,
                "content_type": art.content_type,
                "size_bytes": art.size_bytes,
                "sha256": art.sha256,
                "width": art.width,
                "height": art.height,
                "duration_ms": art.duration_ms,
                "created_at": end.at,
                "data": art.data,
                "cache_key": end.cache_key,
            }
        )
    if end.credits > 0:
        rows.ledger.append(_ledger_row(batch, end.node_id, "charge", end.credits, end.at))


def _end_run(conn: Connection, batch: Batch, rows: _Rows) -> None:
    assert batch.run_end is not None
    status, at, error, credits_used, release = batch.run_end
    result = _RUN_END[status].run(
        conn, {"run": batch.run_id, "at": at, "error": error, "used": credits_used}
    )
    if result.rowcount != 1:
        raise StaleTransition(f"run {batch.run_id} is no longer running")
    if release > 0:
        rows.release += release
        rows.ledger.append(_ledger_row(batch, "", "release", release, at))


def numbered(batch: Batch, next_seq: int) -> list[Event]:
    """The batch's events, numbered from ``next_seq`` in the order they were recorded."""
    return [
        Event(
            type=type_,
            seq=next_seq + i,
            ts=at,
            run_id=batch.run_id,
            workflow_id=batch.workflow_id,
            account_id=batch.account_id,
            node_id=node_id,
            data=data,
        )
        for i, (type_, node_id, data, at) in enumerate(batch.events)
    ]


def _event_row(e: Event) -> dict[str, Any]:
    return {
        "run_id": e.run_id,
        "seq": e.seq,
        "type": e.type,
        "node_id": e.node_id,
        "data": e.data,
        "ts": e.ts,
    }
