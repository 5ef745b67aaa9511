"""The run and node state machines: which status may follow which.

Every status change in the database is a conditional UPDATE whose WHERE clause names the
allowed *from* states (see transitions.py), so a late or duplicated transition — a node
finishing after its run was cancelled, a second worker resuming a run — changes nothing
instead of corrupting the record.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """The published statuses are running, completed and failed: a run that ends on its own
    ends completed or failed. A run ended by a cancel request (the cancel endpoint, or its
    workflow deleted while it ran) ends ``cancelled``, so that a caller can tell a run that
    was stopped from one that broke."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class NodeStatus(StrEnum):
    PENDING = "pending"  # waiting for its inputs
    QUEUED = "queued"  # runnable: every input completed; not yet claimed by an executor
    RUNNING = "running"  # claimed by an executor (claimed_by names it)
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    # Shown, never stored: a running Approval node whose approval is pending (its row in
    # ``approvals`` is the truth of the wait; engine/approvals.py). No transition leads
    # here: the node is ``running`` to the state machine, as a provider node waiting on its
    # provider is.
    WAITING = "waiting"


FINISHED_NODE_STATES = frozenset(
    {NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.SKIPPED, NodeStatus.CANCELLED}
)

# to-state -> allowed from-states
NODE_FROM: dict[NodeStatus, frozenset[NodeStatus]] = {
    # Runnable; or back from running when the process that ran it died.
    NodeStatus.QUEUED: frozenset({NodeStatus.PENDING, NodeStatus.RUNNING}),
    # Claimed. The in-process executor starts a node the moment it is runnable when it has
    # room, without committing ``queued`` first.
    NodeStatus.RUNNING: frozenset({NodeStatus.PENDING, NodeStatus.QUEUED}),
    # A cache hit completes a node without running it.
    NodeStatus.COMPLETED: frozenset({NodeStatus.RUNNING, NodeStatus.PENDING, NodeStatus.QUEUED}),
    NodeStatus.FAILED: frozenset({NodeStatus.RUNNING, NodeStatus.PENDING, NodeStatus.QUEUED}),
    NodeStatus.SKIPPED: frozenset({NodeStatus.PENDING}),
    NodeStatus.CANCELLED: frozenset({NodeStatus.PENDING, NodeStatus.QUEUED, NodeStatus.RUNNING}),
}

RUN_FROM: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.COMPLETED: frozenset({RunStatus.RUNNING}),
    RunStatus.FAILED: frozenset({RunStatus.RUNNING}),
    RunStatus.CANCELLED: frozenset({RunStatus.RUNNING}),
}

FINISHED_RUN_STATES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class StaleTransition(Exception):
    """A conditional update matched nothing: someone else changed the run first."""
