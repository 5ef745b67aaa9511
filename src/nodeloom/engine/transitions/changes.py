"""What one step of a run changed (``Batch``) and the parts it names: pure data, no SQL.

engine/run_state.py and engine/submit.py fill a batch; ``apply`` and ``created_alone`` write it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeloom.db.prepared import Prepared
from nodeloom.events.model import EventType
from nodeloom.states import NodeStatus, RunStatus


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
class NodeEnd:
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
    retry_version: int | None = None  # the saved version ``graph_json`` is, if it is one
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
    ended: list[NodeEnd] = field(default_factory=list)
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
            NodeEnd(
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
            NodeEnd(
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
