"""Running a ``Workflow`` node's child (ADR 0012; resolving it is engine/subworkflows.py).

The node's execution starts the child as a real run through the same ``Acceptor`` as an
execute, linked both ways in the acceptance transaction (``runs.parent_run_id``/
``parent_node_id``, ``node_runs.child_run_id``), and waits for its end. Waiting is I/O on
the event loop: no sandbox process, no execution slot. The link is unique per (parent run,
node), so a node started again (a resumed driver, a queue job given back) finds its child
instead of starting another. The node completes with the child's output artifact (shared,
as a cache hit shares one) or fails quoting the child's error; cancelling the parent cancels
the child.

It sits above engine/submit.py (it accepts runs) and engine/executor.py (it runs a task);
the executor reaches it through ``ExecutorEnv.children``, handed in by the runtime.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from nodeloom.db.models import NodeRun, Run, utcnow
from nodeloom.engine import work
from nodeloom.engine.executor import ExecutorEnv, NodeTask
from nodeloom.engine.run_request import RunRequest
from nodeloom.engine.run_state import Outcome, artifact_info, failed
from nodeloom.engine.submit import Acceptor
from nodeloom.errors import ProblemError
from nodeloom.sdk._node import CONTENT_TYPES
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.store import Record
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import runs as run_store

log = logging.getLogger("nodeloom.engine")

# The text a Workflow node hands its child, all inputs together (the run input's bound).
MAX_CHILD_INPUT_BYTES = 1024 * 1024
# Polling the child's status: from the first interval, growing, up to the last.
POLL_FIRST, POLL_MAX = 0.02, 1.0

_RUNS = cast(sa.Table, Run.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)


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
