"""Run and node run rows as the API shows them: one shape for the run endpoints, the run
callbacks' body and the events that carry a record. Built as plain dicts straight from the
rows, without a validation pass (these are polled); ``RunSummary``, ``NodeRunOut`` and
``RunOut`` in runs.py document them in the OpenAPI document.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from nodeloom.db.models import utcnow
from nodeloom.timestamps import format_timestamp


def _ms(start: datetime | None, end: datetime | None) -> int | None:
    if start is None:
        return None
    return max(0, int(((end or utcnow()) - start).total_seconds() * 1000))


def node_run_out(node: Any, item_count: int | None = None) -> dict[str, Any]:
    """A node run row as the API shows it (``NodeRunOut``). An item's node run is stored
    under its instance id ``<node id>#<item>`` (engine/batches.py): shown as the drawn
    node's id with the item index, and ``item_count``, its ForEach's items."""
    node_id = node.node_id
    if node.item_index is not None:
        node_id = node_id.rpartition("#")[0]
    return {
        "node_id": node_id,
        "item_index": node.item_index,
        "item_count": item_count if node.item_index is not None else None,
        "type": node.type,
        "status": node.status,
        "artifact_id": node.artifact_id,
        "credits_used": node.credits_used,
        "cached": node.cached,
        "started_at": _ts(node.started_at),
        "finished_at": _ts(node.finished_at),
        "duration_ms": _ms(node.started_at, node.finished_at) if node.started_at else None,
        "error": node.error,
        "child_run_id": node.child_run_id,
        "child_workflow_id": node.child_workflow_id,
        "server": node.server,
    }


def run_summary(run: Any, credits_so_far: int | None = None) -> dict[str, Any]:
    """A run row as the API shows it (``RunSummary``): running runs show what their
    completed nodes were charged so far."""
    used = run.credits_used if run.status != "running" else (credits_so_far or 0)
    return {
        "id": run.id,
        "workflow_id": run.workflow_id,
        "status": run.status,
        "credits_used": used,
        "estimated_credits": run.estimated_credits,
        "duration_ms": _ms(run.created_at, run.finished_at) or 0,
        "created_at": _ts(run.created_at),
        "finished_at": _ts(run.finished_at),
        "error": _error(run.error),
        "trigger": run.trigger,
        "webhook_id": run.webhook_id,
        "workflow_version": run.workflow_version,
        "retried_from": run.retried_from,
        "parent_run_id": run.parent_run_id,
        "parent_node_id": run.parent_node_id,
    }


def _ts(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def _error(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if not value:
        return None
    return {
        "code": value.get("code", "error"),
        "message": value.get("message", ""),
        "node_id": value.get("node_id"),
    }


def run_record(run: Any, nodes: list[Any], retries: list[str]) -> dict[str, Any]:
    """The run as ``GET /workflows/{id}/runs/{run_id}`` shows it (``retries``: the runs
    that retry it, oldest first)."""
    # A ForEach's items are added to the run all at once: each drawn node of its region
    # has one entry per item, so its entries count its items.
    items = Counter(n.node_id.rpartition("#")[0] for n in nodes if n.item_index is not None)
    node_runs = [
        node_run_out(n, items[n.node_id.rpartition("#")[0]] if n.item_index is not None else None)
        for n in nodes
    ]
    body = run_summary(run, sum(n["credits_used"] for n in node_runs))
    body["input"] = run.input
    body["node_runs"] = node_runs
    body["retries"] = retries
    body["parent_workflow_id"] = run.parent_workflow_id
    return body
