"""Sub-workflows: a ``Workflow`` node runs another workflow of the same account as a step
(ADR 0012, nodes/subworkflow.py).

Two halves:

- **Resolving** (``resolve``): before a graph with ``Workflow`` nodes is validated, each
  child it names is read — the account's own, not deleted, transitively — and turned into
  its interface (``ChildInterface``: its TextInputs' names, its one output node's kind, its
  estimate). Another account's id reads as no workflow at all (404-like wording); a chain
  that comes back to a workflow already on it is a cycle; either is a problem at the node's
  ``data/workflow_id``. ``graph.validate_graph`` takes the result as data and stays pure.
- **Running** (``ChildRuns``): the node's execution starts the child as a real run through
  the same ``Acceptor`` as an execute, linked both ways in the acceptance transaction
  (``runs.parent_run_id``/``parent_node_id``, ``node_runs.child_run_id``), and waits for its
  end. Waiting is I/O on the event loop: no sandbox process, no execution slot. The link is
  unique per (parent run, node), so a node started again (a resumed driver, a queue job
  given back) finds its child instead of starting another. The node completes with the
  child's output artifact (shared, as a cache hit shares one) or fails quoting the child's
  error; cancelling the parent cancels the child.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from nodeloom.db.dialect import serialize
from nodeloom.db.models import NodeRun, Run, Workflow, utcnow
from nodeloom.engine import work
from nodeloom.engine.graph import Children, Graph, validate_graph
from nodeloom.engine.run_state import Outcome, artifact_info, failed
from nodeloom.errors import FieldError, InvalidGraph, ProblemError
from nodeloom.nodes.registry import Registry
from nodeloom.nodes.subworkflow import WORKFLOW_TYPE, ChildInterface
from nodeloom.nodes.text import TextInputParams
from nodeloom.sdk._node import CONTENT_TYPES
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.store import Record
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import runs as run_store

if TYPE_CHECKING:
    from nodeloom.engine.executor import ExecutorEnv, NodeTask
    from nodeloom.engine.submit import Acceptor

log = logging.getLogger("nodeloom.engine")

# Workflows nested deeper than this are refused (a bound on resolving, not a cycle).
MAX_DEPTH = 8
# The text a Workflow node hands its child, all inputs together (the run input's bound).
MAX_CHILD_INPUT_BYTES = 1024 * 1024
# Polling the child's status: from the first interval, growing, up to the last.
POLL_FIRST, POLL_MAX = 0.02, 1.0

_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)


# -- resolving -----------------------------------------------------------------------------


def workflow_ids_in(graph_json: Any) -> list[str]:
    """The workflow ids the graph's ``Workflow`` nodes name, once each, in node order."""
    if not isinstance(graph_json, dict) or not isinstance(graph_json.get("nodes"), list):
        return []
    found: dict[str, None] = {}
    for raw in graph_json["nodes"]:
        if isinstance(raw, dict) and raw.get("type") == WORKFLOW_TYPE:
            data = raw.get("data")
            wid = data.get("workflow_id") if isinstance(data, dict) else None
            if isinstance(wid, str):
                found[wid] = None
    return list(found)


CYCLE = "workflows may not run each other in a cycle"


def is_cycle(message: str) -> bool:
    """Is this validation message a cycle between workflows?"""
    return message.startswith(CYCLE + ":")


class Cycle(str):
    """A cycle found while resolving: reported as is by every workflow on it."""

    __slots__ = ()


class _Resolver:
    def __init__(
        self, conn: Connection, account_id: str, registry: Registry, settings: Settings
    ) -> None:
        self.conn = conn
        self.account_id = account_id
        self.registry = registry
        self.settings = settings
        # Only answers that do not depend on the path they were reached by are kept: a
        # usable interface, or a workflow that does not exist.
        self.known: dict[str, ChildInterface | str] = {}

    def children(self, graph_json: Any, path: list[str]) -> dict[str, ChildInterface | str]:
        return {wid: self.interface(wid, path) for wid in workflow_ids_in(graph_json)}

    def interface(self, workflow_id: str, path: list[str]) -> ChildInterface | str:
        if workflow_id in path:
            loop = [*path[path.index(workflow_id) :], workflow_id]
            return Cycle(CYCLE + ": " + " -> ".join(loop))
        if workflow_id in self.known:
            return self.known[workflow_id]
        if len(path) >= MAX_DEPTH:
            return f"workflows are nested at most {MAX_DEPTH} deep"
        row = self.conn.execute(
            sa.select(_WORKFLOWS.c.graph_json).where(
                _WORKFLOWS.c.id == workflow_id,
                _WORKFLOWS.c.account_id == self.account_id,
                _WORKFLOWS.c.deleted_at.is_(None),
            )
        ).first()
        if row is None:
            # Another account's workflow reads exactly like one that does not exist.
            self.known[workflow_id] = f"no workflow {workflow_id!r} in this account"
            return self.known[workflow_id]
        children = self.children(row.graph_json, [*path, workflow_id])
        cycle = next((c for c in children.values() if isinstance(c, Cycle)), None)
        if cycle is not None:
            return cycle
        checked = validate_graph(row.graph_json, self.registry, self.settings, children)
        if isinstance(checked, list):
            found = "; ".join(f"{p.pointer}: {p.message}" for p in checked[:3])
            return f"workflow {workflow_id} does not validate: {found}"
        answer = interface_of(workflow_id, checked)
        if not isinstance(answer, str):
            self.known[workflow_id] = answer
        return answer


def interface_of(workflow_id: str, graph: Graph) -> ChildInterface | str:
    """What a Workflow node running ``graph`` takes and gives, or why it cannot."""
    sinks = [n for n in graph.order if not graph.downstream[n]]
    if len(sinks) != 1:
        what = ", ".join(sinks) if sinks else "none"
        return (
            f"workflow {workflow_id} has {len(sinks)} output nodes ({what}); a Workflow node "
            "runs a workflow with exactly one (a node nothing else reads)"
        )
    names: dict[str, None] = {}
    for node_id in graph.order:
        node = graph.nodes[node_id]
        if node.type == "TextInput" and isinstance(node.params, TextInputParams):
            names[node.params.key or "text"] = None
    sink = graph.nodes[sinks[0]]
    return ChildInterface(
        workflow_id=workflow_id,
        inputs=tuple(names),
        output_node=sink.id,
        output=sink.node.spec.output.kind,
        estimate=graph.estimate_credits(),
    )


def resolve(
    conn: Connection,
    account_id: str,
    graph_json: Any,
    registry: Registry,
    settings: Settings,
    workflow_id: str | None = None,
) -> Children:
    """The children ``graph_json`` names, resolved for ``validate_graph``. ``workflow_id``:
    the workflow the graph is (or will be) stored as, so that naming itself — directly or
    through others — is found as a cycle."""
    if not workflow_ids_in(graph_json):
        return {}
    resolver = _Resolver(conn, account_id, registry, settings)
    return resolver.children(graph_json, [workflow_id] if workflow_id else [])


def cycles(
    conn: Connection,
    account_id: str,
    graph_json: Any,
    registry: Registry,
    settings: Settings,
    workflow_id: str | None,
) -> list[FieldError]:
    """The ``Workflow`` nodes of ``graph_json`` (stored as ``workflow_id``) through which
    workflows would run each other in a cycle, with pointers, read from the workflows as
    ``conn`` sees them now."""
    children = resolve(conn, account_id, graph_json, registry, settings, workflow_id)
    found: list[FieldError] = []
    for index, raw in enumerate(graph_json.get("nodes") or []):
        if not isinstance(raw, dict) or raw.get("type") != WORKFLOW_TYPE:
            continue
        data = raw.get("data")
        wid = data.get("workflow_id") if isinstance(data, dict) else None
        answer = children.get(wid) if isinstance(wid, str) else None
        if isinstance(answer, Cycle):
            found.append(FieldError(f"/graph_json/nodes/{index}/data/workflow_id", answer))
    return found


def save_without_cycle(
    conn: Connection,
    account_id: str,
    graph_json: Any,
    registry: Registry,
    settings: Settings,
    workflow_id: str,
) -> None:
    """Called in the transaction that saves ``graph_json`` as ``workflow_id``: refuses a
    save that closes a cycle with what is committed now. Checked before the transaction
    alone, two saves at once (X -> Y and Y -> X) each saw the other's old graph and both
    passed; the account's saves of graphs with children are serialized here (an advisory
    lock on PostgreSQL; SQLite has one writer), so the second sees the first."""
    if not has_children(graph_json):
        return
    serialize(conn, f"workflow-children:{account_id}")
    problems = cycles(conn, account_id, graph_json, registry, settings, workflow_id)
    if problems:
        raise InvalidGraph(problems[0].message.capitalize() + ".", errors=problems)


def has_children(graph_json: Any) -> bool:
    return bool(workflow_ids_in(graph_json))


# -- running -------------------------------------------------------------------------------


def child_of(conn: Connection, parent_run_id: str, node_id: str) -> str | None:
    """The run the parent's node started, if it did."""
    found: str | None = conn.execute(
        sa.select(_RUNS.c.id).where(
            _RUNS.c.parent_run_id == parent_run_id, _RUNS.c.parent_node_id == node_id
        )
    ).scalar()
    return found


def _status(conn: Connection, run_id: str) -> Record | None:
    return conn.execute(
        sa.select(_RUNS.c.status, _RUNS.c.error).where(_RUNS.c.id == run_id)
    ).first()


def _output(conn: Connection, run_id: str) -> tuple[str | None, Record | None]:
    """The child's output node and its artifact row (None when it has none)."""
    graph_json: dict[str, Any] = cast(dict[str, Any], run_store.graph_json(conn, run_id))
    nodes = [n.get("id") for n in graph_json.get("nodes", []) if isinstance(n, dict)]
    sources = {e.get("source") for e in graph_json.get("edges", []) if isinstance(e, dict)}
    sinks = [n for n in nodes if n not in sources]
    if len(sinks) != 1 or not isinstance(sinks[0], str):
        return None, None
    artifact_id = conn.execute(
        sa.select(_NODES.c.artifact_id).where(
            _NODES.c.run_id == run_id, _NODES.c.node_id == sinks[0]
        )
    ).scalar()
    if artifact_id is None:
        return sinks[0], None
    return sinks[0], artifact_store.by_ids(conn, [artifact_id]).get(artifact_id)


def _cancel_requested(conn: Connection, run_id: str) -> bool:
    return bool(
        conn.execute(sa.select(_RUNS.c.cancel_requested).where(_RUNS.c.id == run_id)).scalar()
    )


class ChildRuns:
    """Runs the child of a ``Workflow`` node (the executor hands such nodes here)."""

    def __init__(
        self,
        env: ExecutorEnv,
        acceptor: Acceptor,
        cancel: Callable[[str], Awaitable[None]],
    ) -> None:
        self.env = env
        self.acceptor = acceptor
        self.cancel = cancel  # asks a run to stop (its flag committed, its executor told)

    async def run(self, task: NodeTask) -> Outcome:
        node_id = task.node.id
        parent = task.run_id
        db = self.env.db
        child = await db.read(lambda c: child_of(c, parent, node_id))
        if child is None:
            started = await self._start(task)
            if isinstance(started, Outcome):
                return started
            child = started
        try:
            return await self._wait(task, child)
        except asyncio.CancelledError:
            # Stopped: by the parent's cancel (then the child is cancelled too), or by a
            # shutdown (then the node runs again later and finds its child still running).
            try:
                wanted = await asyncio.shield(db.read(lambda c: _cancel_requested(c, parent)))
                if wanted:
                    await asyncio.shield(self.cancel(child))
            except Exception:
                log.warning("could not cancel child run %s of %s", child, parent, exc_info=True)
            raise

    async def _input(self, task: NodeTask) -> dict[str, Any] | None:
        values: dict[str, Any] = {}
        total = 0
        for name, info in task.inputs.items():
            if info is None or isinstance(info, list):
                continue
            if info.data is not None:
                data = info.data
            else:
                data = b"".join(
                    [chunk async for chunk in self.env.store.read(info.sha256, 0, info.size_bytes)]
                )
            total += len(data)
            if total > MAX_CHILD_INPUT_BYTES:
                raise ValueError(
                    f"the inputs of a Workflow node are at most {MAX_CHILD_INPUT_BYTES} bytes"
                )
            values[name] = data.decode("utf-8", errors="replace")
        return values or None

    async def _start(self, task: NodeTask) -> str | Outcome:
        from nodeloom.engine.submit import RunRequest

        node_id = task.node.id
        workflow_id = task.node.params.workflow_id  # type: ignore[attr-defined]
        try:
            run_input = await self._input(task)
        except ValueError as exc:
            return failed(node_id, "child_not_started", str(exc), utcnow())
        why = await self.env.db.read(
            lambda c: work.over(
                self.env.settings.run_max_work,
                work.tree_work(c, task.run_id),
                work.child_work(c, workflow_id),
            )
        )
        if why is not None:
            message = f"the sub-workflow {workflow_id} was not started: {why}"
            return failed(node_id, work.RUN_TOO_LARGE, message, utcnow())
        request = RunRequest(
            account_id=task.account_id,
            workflow_id=workflow_id,
            run_input=run_input,
            use_cache=task.use_cache,
            plan=task.plan,
            trigger="workflow",
            parent_run_id=task.run_id,
            parent_node_id=node_id,
        )
        try:
            accepted = await self.acceptor.accept(request)
        except ProblemError as exc:
            message = f"the sub-workflow {workflow_id} could not start: {exc.detail}"
            return failed(node_id, "child_not_started", message, utcnow())
        except IntegrityError:
            # Started meanwhile by another execution of this node: that child it is.
            parent = task.run_id
            found = await self.env.db.read(lambda c: child_of(c, parent, node_id))
            if found is None:
                raise
            return found
        run_id: str = accepted.answer["run_id"]
        return run_id

    async def _wait(self, task: NodeTask, child: str) -> Outcome:
        node_id = task.node.id
        db = self.env.db
        delay = POLL_FIRST
        while True:
            row = await db.read(lambda c: _status(c, child))
            if row is None:
                message = f"the sub-workflow's run {child} is gone"
                return failed(node_id, "child_failed", message, utcnow())
            if row.status != RunStatus.RUNNING:
                break
            await asyncio.sleep(delay)
            delay = min(POLL_MAX, delay * 1.5)
        if row.status == RunStatus.CANCELLED:
            message = f"the sub-workflow's run {child} was cancelled"
            return failed(node_id, "child_cancelled", message, utcnow())
        if row.status != RunStatus.COMPLETED:
            error = row.error or {}
            where = f" (node {error['node_id']})" if error.get("node_id") else ""
            message = (
                f"the sub-workflow's run {child} failed{where}: "
                f"{error.get('message', 'no message')}"
            )
            return failed(node_id, "child_failed", message, utcnow())
        sink, artifact = await db.read(lambda c: _output(c, child))
        expected = CONTENT_TYPES[task.node.node.spec.output.kind]
        if artifact is None:
            message = f"the sub-workflow's run {child} completed without one output ({sink})"
            return failed(node_id, "child_failed", message, utcnow())
        if artifact.content_type != expected:
            message = (
                f"the sub-workflow's output is {artifact.content_type}, this node gives "
                f"{expected}: the workflow changed since this run started"
            )
            return failed(node_id, "child_failed", message, utcnow())
        # The child's artifact, shared (as a cache hit shares one): uncharged here, the
        # child run charged what it used.
        return Outcome(node_id, NodeStatus.COMPLETED, utcnow(), artifact_info(artifact))
