"""The step logic both executors share: how a run's state is built from its rows, how it
moves on, how it ends, and where its events' ``seq`` comes from.

Two executors drive runs. The in-process driver (runner.py, the embedded default) owns a
run and keeps its ``RunState`` in memory between steps; queue workers (steps.py, scale-out)
own nothing and load the run under its row lock for every step. Whatever differs between
them is *when* they load and commit; *what* a step does is decided here, once:

- ``load``: a running run's state from its rows — one function, one query set
  (store/runs.py), for the driver adopting a run and for every queue step;
- ``fail_unrunnable``: a run whose stored graph this server cannot run fails with
  ``invalid_graph``, its unfinished nodes cancelled, what it already charged kept;
- ``interrupted``: a node whose process stopped runs again, unless it was started
  ``node_max_attempts`` times — then it fails as ``node_crashed``;
- ``cancel``: a cancel request cancels every unfinished node except those still running
  elsewhere, and ends the run ``cancelled`` once none is;
- ``advance``: start (or queue) what became runnable, and end the run when every node
  ended — the one place a run ends on its own;
- ``Throttle``: progress reports, at most one a second per node, the last (1.0) always.

The seq of a run's events has one source: the run's event log. ``load`` reads the log's
last seq with the rest of the state (``RunState.seq``; a run being accepted has none yet),
``write`` numbers a step's events from there and ``committed`` moves ``RunState.seq`` past
them once the step committed. Writers of one run's events never overlap — a queue step
holds the run's row lock, the driver is the run's only writer and commits one step at a
time, and SQLite has one writer anyway — so the log has no gaps and no duplicates, and
commit order is seq order (the primary key (run, seq) would refuse a duplicate). The
driver reads the log once, when it adopts a run; a queue step reads it under the lock.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.db.models import utcnow
from nodeloom.engine import batches, subworkflows
from nodeloom.engine.executor import small_inputs
from nodeloom.engine.graph import Graph
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.engine.run_state import Outcome, RunState, artifact_info, crashed
from nodeloom.engine.transitions import Batch, apply
from nodeloom.events.model import Event, EventType
from nodeloom.metrics import Metrics
from nodeloom.nodes.approval import APPROVAL_TYPE
from nodeloom.nodes.registry import Registry
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.store import Record
from nodeloom.store import runs as run_store

# Progress events: at most one per node per interval; a final report (1.0) always.
PROGRESS_INTERVAL = 1.0
# Instant nodes executed within one step at most (then it commits and announces them).
INSTANT_PER_STEP = 64

COUNTED: dict[str, str] = {
    EventType.RUN_COMPLETED: "nodeloom_runs_completed_total",
    EventType.RUN_FAILED: "nodeloom_runs_failed_total",
    EventType.RUN_CANCELLED: "nodeloom_runs_cancelled_total",
    EventType.NODE_COMPLETED: "nodeloom_nodes_completed_total",
    EventType.NODE_FAILED: "nodeloom_nodes_failed_total",
}


def count_events(metrics: Metrics, events: list[Event]) -> None:
    for event in events:
        if event.type in COUNTED:
            metrics.inc(COUNTED[event.type], help_="Finished runs and nodes by type.")


# -- building the state --------------------------------------------------------------------


class Unrunnable(Exception):
    """The run's stored graph does not validate against this server's node catalog."""

    def __init__(self, run_id: str, problem: str) -> None:
        super().__init__(f"run {run_id}: {problem}")
        self.run_id = run_id
        self.problem = problem


class RunGraphs:
    """Checked graphs by run id: a run's graph never changes, so each process validates it
    once (the catalog is fixed for the life of the process). A graph that does not
    validate is kept as the problems found (a string).

    A run copies its workflow's graph at a numbered version (``runs.workflow_version``; a
    retry has a graph of its own and no number), so the runs of one version share one
    checked graph: a worker taking the first node of a new run reads and validates nothing
    it has seen before. Not for graphs with sub-workflows, whose children are resolved as
    they are when each run is first loaded."""

    def __init__(self, registry: Registry, settings: Settings, size: int = 2048) -> None:
        self.registry = registry
        self.settings = settings
        self.size = size
        self._items: OrderedDict[str, Graph | str] = OrderedDict()
        self._versions: OrderedDict[tuple[str, int], Graph | str] = OrderedDict()

    def known(self, run_id: str) -> Graph | str | None:
        """The run's graph if this process has it already (no database read)."""
        return self._items.get(run_id)

    def get(
        self,
        conn: Connection,
        run_id: str,
        account_id: str,
        version: tuple[str, int] | None = None,
    ) -> Graph | str:
        """The run's checked graph; ``version``: its workflow's id and version number,
        when the run's graph is that version's."""
        if run_id in self._items:
            self._items.move_to_end(run_id)
            return self._items[run_id]
        shared = self._versions.get(version) if version is not None else None
        if shared is not None:
            assert version is not None
            self._versions.move_to_end(version)
            return self._keep(self._items, run_id, shared)
        graph_json = run_store.graph_json(conn, run_id)
        # Its sub-workflows as they are when this process first loads the run (a child
        # run is started from its workflow's version of that moment anyway).
        children = subworkflows.resolve(conn, account_id, graph_json, self.registry, self.settings)
        checked = validate_graph(graph_json, self.registry, self.settings, children)
        if isinstance(checked, list):
            graph: Graph | str = "; ".join(f"{p.pointer}: {p.message}" for p in checked[:3])
        else:
            graph = checked
        if version is not None and not children:
            self._keep(self._versions, version, graph)
        return self._keep(self._items, run_id, graph)

    def _keep(
        self, items: OrderedDict[Any, Graph | str], key: Any, graph: Graph | str
    ) -> Graph | str:
        items[key] = graph
        if len(items) > self.size:
            items.popitem(last=False)
        return graph


def load(conn: Connection, run_id: str, graphs: RunGraphs) -> RunState | None:
    """The running run as stored, its row locked for this transaction; None once it has
    finished (or never existed). Raises Unrunnable when its graph no longer validates
    (``fail_unrunnable`` then ends it)."""
    run = run_store.locked(conn, run_id)
    if run is None or run.status != RunStatus.RUNNING:
        return None
    version = None if run.workflow_version is None else (run.workflow_id, run.workflow_version)
    graph = graphs.get(conn, run_id, run.account_id, version)
    if isinstance(graph, str):
        raise Unrunnable(run_id, graph)
    nodes, seq = run_store.nodes_as_stepped(conn, run_id)
    state = _state(run, graph, nodes, seq)
    if graph.batches:
        state.graph = _expanded(graph, state)
        # A failed item fails only itself, unless its ForEach fails fast: the run's error
        # is the first failure that is not an item's own.
        state.first_error = next(
            (
                state.error_of(node.node_id, node.error or {})
                for node in nodes
                if node.status == NodeStatus.FAILED
                and node.artifact_id is None  # else its error went down its error output
                and not state.item_failure(node.node_id)
            ),
            None,
        )
    for node in nodes:
        if node.id is not None:  # its output's artifact (run_store.nodes_as_stepped)
            state.artifacts[node.node_id] = artifact_info(node)
    return state


def _expanded(graph: Graph, state: RunState) -> Graph:
    """The run's graph as its rows left it: a completed ForEach has its items' rows
    (added in the step that completed it), the others none yet (engine/batches.py)."""
    counts: dict[str, int | None] = {}
    for for_each in graph.batches.regions:
        if state.status.get(for_each) != NodeStatus.COMPLETED:
            counts[for_each] = None
            continue
        count = 0
        while batches.instance_id(for_each, count) in state.status:
            count += 1
        counts[for_each] = count
    return batches.expand(graph, counts)


def _state(run: Record, graph: Graph, nodes: list[Record], seq: int) -> RunState:
    state = RunState(
        run_id=run.id,
        account_id=run.account_id,
        workflow_id=run.workflow_id,
        graph=graph,
        run_input=run.input,
        use_cache=run.use_cache,
        estimate=run.estimated_credits,
        created_at=run.created_at,
        plan=run.plan,
        status={},
        cancel_requested=bool(run.cancel_requested),
        seq=seq,
    )
    for node in nodes:
        state.status[node.node_id] = NodeStatus(node.status)
        state.credits[node.node_id] = node.credits_used
        state.attempts[node.node_id] = node.attempts
        state.claims[node.node_id] = node.claimed_by
        if node.ports is not None:
            state.ports[node.node_id] = tuple(node.ports)
        # A failed node with an artifact sent its error down its error output: not the run's.
        failed = node.status == NodeStatus.FAILED and node.artifact_id is None
        if failed and state.first_error is None:
            state.first_error = {**(node.error or {}), "node_id": node.node_id}
    return state


def fail_unrunnable(conn: Connection, run_id: str, problem: str) -> list[Event]:
    """A running run whose stored graph this server's catalog no longer accepts (a node
    type removed, a setting lowered): its unfinished nodes are cancelled and it fails with
    ``invalid_graph``; what completed nodes were charged stays charged, the rest of the
    hold is released. Locks and reads the run like ``load``."""
    run = run_store.locked(conn, run_id)
    if run is None or run.status != RunStatus.RUNNING:
        return []
    nodes = run_store.node_states(conn, run_id)
    # No checked graph: a stand-in that only orders the nodes (nothing here asks what runs).
    order = [node.node_id for node in nodes]
    stand_in = Graph(nodes={}, inputs={}, downstream={n: [] for n in order}, order=order)
    state = _state(run, stand_in, nodes, run_store.last_seq(conn, run_id))
    now = utcnow()
    batch = state.batch()
    state.cancel(batch, now)
    message = f"the run's graph no longer validates against this server's node catalog: {problem}"
    state.finish(batch, now, {"code": "invalid_graph", "message": message, "node_id": None})
    return write(conn, state, batch)


# -- moving on -----------------------------------------------------------------------------


def advance(
    state: RunState, batch: Batch, now: datetime, owner: str | None = None, room: int = 0
) -> list[str]:
    """Start queued and runnable nodes, claimed by ``owner``, while ``room`` more may run;
    queue the runnable rest; end the run when every node ended. The nodes started. Queue
    workers start nothing here (``room`` 0): every runnable node is queued for a job."""
    waiting = state.with_status(NodeStatus.QUEUED) if room else []
    runnable = state.runnable()
    starting = (waiting + runnable)[:room]
    chosen = set(starting)
    state.queue(batch, [n for n in runnable if n not in chosen], now)
    if starting:
        assert owner is not None, "started nodes are claimed by someone"
        for node_id in starting:
            state.start(batch, node_id, now, owner)
    elif state.all_finished:
        state.finish(batch, now)
    return starting


def interrupted(
    state: RunState, batch: Batch, node_ids: Iterable[str], now: datetime, max_attempts: int
) -> list[str]:
    """Nodes found running whose process stopped (a crash, a lost worker): queued again,
    unless they were started ``max_attempts`` times already — a node that keeps taking its
    process down with it fails as ``node_crashed`` (its pending descendants skipped)
    instead of being retried for ever. An Approval node runs no code that could take its
    process down, and may wait across many restarts: it is always queued again (it finds
    its approval as it was; engine/approvals.py). The nodes queued again."""
    again: list[str] = []
    for node_id in node_ids:
        attempts = state.attempts.get(node_id, 0)
        if attempts < max_attempts or state.graph.nodes[node_id].type == APPROVAL_TYPE:
            again.append(node_id)
        else:
            state.record(batch, crashed(node_id, attempts, now))
    state.queue(batch, again, now)
    return again


def cancel(
    state: RunState, batch: Batch, now: datetime, elsewhere: Iterable[str] = ()
) -> list[str]:
    """A cancel was asked: every unfinished node is cancelled except ``elsewhere`` (running
    in a process that has yet to stop them), and the run ends ``cancelled`` as soon as none
    is left. The claims of the nodes still running elsewhere, for their jobs to be stopped
    (each one's stop is recorded by a later step, which ends the run)."""
    still = [n for n in elsewhere if state.status.get(n) == NodeStatus.RUNNING]
    kept = set(still)
    state.cancel(batch, now, [n for n in state.unfinished() if n not in kept])
    if not still:
        state.finish_cancelled(batch, now)
    return [claim for n in still if (claim := state.claims.get(n))]


# -- instant nodes -------------------------------------------------------------------------


def is_instant(state: RunState, node_id: str) -> bool:
    node = state.graph.nodes[node_id]
    return node.node.instant(node.params) and small_inputs(state.inputs_of(node_id))


async def run_instant(
    state: RunState,
    batch: Batch,
    started: list[str],
    execute: Callable[[str], Awaitable[Outcome | None]],
    advance_more: Callable[[], list[str]],
    stop: Callable[[], bool],
) -> list[str]:
    """Execute the started nodes that finish at once (``NodeType.instant``: a text input, a
    template that only substitutes) right now, and record them in this same step, then start
    what they made runnable (``advance_more``): a chain of such nodes is one transaction,
    with the same events and charges as node-by-node. At most INSTANT_PER_STEP per step, so
    a long chain still commits (and announces) as it goes. ``execute`` answers None for a
    node that turns out not to be instant. Returns the started nodes left to execute as
    tasks."""
    left: list[str] = []
    budget = INSTANT_PER_STEP
    while started:
        ran = False
        for node_id in started:
            outcome = None
            if budget > 0 and is_instant(state, node_id):
                outcome = await execute(node_id)
            if outcome is None:
                left.append(node_id)
                continue
            state.record(batch, outcome)
            budget -= 1
            ran = True
        if not ran or stop():
            return left
        started = advance_more()
    return left


# -- progress ------------------------------------------------------------------------------


class Throttle:
    """Which progress reports become events: at most one per key (a run's node) per
    ``interval`` seconds, and always the final one (1.0), so a watcher sees a node reach
    100 % however fast it got there."""

    def __init__(
        self, interval: float = PROGRESS_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._last: dict[Hashable, float] = {}

    def due(self, key: Hashable, fraction: float) -> bool:
        now = self.clock()
        last = self._last.get(key)
        if fraction < 1.0 and last is not None and now - last < self.interval:
            return False
        self._last[key] = now
        return True

    def forget(self, key: Hashable) -> None:
        self._last.pop(key, None)


def progress_event(batch: Batch, node_id: str, fraction: float) -> None:
    batch.event(EventType.NODE_PROGRESS, utcnow(), node_id, progress=round(fraction, 4))


def progress(conn: Connection, run_id: str, node_id: str, fraction: float) -> list[Event]:
    """A queue step recording one progress report of a running run (locked, like every
    step, so its seq follows the step before it)."""
    run = run_store.locked(conn, run_id)
    if run is None or run.status != RunStatus.RUNNING:
        return []
    batch = Batch(run_id, run.workflow_id, run.account_id)
    progress_event(batch, node_id, fraction)
    return apply(conn, batch, run_store.last_seq(conn, run_id) + 1)


def waiting(conn: Connection, run_id: str, node_id: str, data: dict[str, Any]) -> list[Event]:
    """A queue step recording that a node waits for a person (``node.waiting``), locked
    like ``progress``."""
    run = run_store.locked(conn, run_id)
    if run is None or run.status != RunStatus.RUNNING:
        return []
    batch = Batch(run_id, run.workflow_id, run.account_id)
    batch.event(EventType.NODE_WAITING, utcnow(), node_id, **data)
    return apply(conn, batch, run_store.last_seq(conn, run_id) + 1)


# -- committing ----------------------------------------------------------------------------


def write(conn: Connection, state: RunState, batch: Batch) -> list[Event]:
    """Write ``batch`` (one step of ``state``'s run); its events numbered on from the
    run's last seq. The caller calls ``committed`` once the transaction has committed."""
    return apply(conn, batch, state.seq + 1)


def committed(state: RunState, events: list[Event]) -> None:
    """``events`` (written by ``write``) are in the run's log now."""
    if events:
        state.seq = events[-1].seq
