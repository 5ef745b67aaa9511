"""Retrying a failed or cancelled run from where it stopped (``POST .../runs/{id}/retry``).

A retry is a new run of the retried run's own graph (its copy of the workflow as it was
when it ran, not the workflow as saved since), with the same input, linked to it by
``retried_from``. The caller may change the params of any node; the rest of the graph is
as it was. Every node that completed in the retried run is *reused* — completed at once in
the new run with the same artifact, ``cached: true`` and 0 credits — unless its params
changed or a node it depends on is not reused (then its input may differ, so it runs
again). Everything else runs: the failed node, the nodes it skipped, the nodes a cancel
stopped. The estimate held is what the nodes that run again cost; reused nodes are never
charged twice.

The reading is done here; the run itself is written by the acceptor like any other
(engine/submit.py), so a retry is driven, queued, resumed after a crash and cancelled
exactly as an execute is.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.engine import branches
from nodeloom.engine.graph import Graph
from nodeloom.engine.run_state import ArtifactInfo, artifact_info
from nodeloom.errors import Conflict, FieldError, InvalidGraph, InvalidRequest, NotFound
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import runs as run_store

RETRYABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})
GRAPH_ROOT = "/graph_json/nodes/"


@dataclass(frozen=True)
class RetrySource:
    """What a retry starts from: the run it retries, the graph it runs (with the retry's
    params), that run's input, and the artifacts of the nodes it reuses (by node id)."""

    # None for an app's run of a pinned version (engine/apps.py), which retries nothing.
    retried_from: str | None
    graph_json: dict[str, Any]
    run_input: dict[str, Any] | None
    reuse: dict[str, ArtifactInfo]
    # The number of the saved version the graph is, when it is one: the retried run's own
    # version, or the workflow's current one for a retry with the current version; None
    # when the retry's params make a graph no version holds.
    version_number: int | None = None


def with_params(
    graph_json: dict[str, Any], params: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, int]]:
    """A copy of ``graph_json`` whose nodes named in ``params`` have those params merged
    into their ``data`` (a key set to a new value; other keys kept), and the index of each
    changed node. A node id the graph does not have is a 400 pointing at it."""
    changed = copy.deepcopy(graph_json)
    nodes = changed.get("nodes") if isinstance(changed, dict) else None
    index = {
        raw.get("id"): i
        for i, raw in enumerate(nodes if isinstance(nodes, list) else [])
        if isinstance(raw, dict)
    }
    unknown = [node_id for node_id in params if node_id not in index]
    if unknown:
        errors = [FieldError(f"/params/{_escape(n)}", "the run has no such node") for n in unknown]
        raise InvalidRequest(
            "params names nodes the run does not have: " + ", ".join(unknown), errors=errors
        )
    positions: dict[str, int] = {}
    for node_id, values in params.items():
        raw = nodes[index[node_id]]  # type: ignore[index]
        data = raw.get("data")
        raw["data"] = {**(data if isinstance(data, dict) else {}), **values}
        positions[node_id] = index[node_id]
    return changed, positions


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def blame_params(problem: InvalidGraph, positions: dict[str, int]) -> InvalidGraph:
    """The graph's problems with those in a changed node's params pointing into the
    request's ``params`` (``/params/<node>/<param>``) instead of into the stored graph."""
    by_index = {f"{GRAPH_ROOT}{i}/data": node_id for node_id, i in positions.items()}
    errors: list[FieldError] = []
    for error in problem.errors:
        pointer = error.pointer
        for prefix, node_id in by_index.items():
            if pointer == prefix or pointer.startswith(prefix + "/"):
                pointer = f"/params/{_escape(node_id)}" + pointer[len(prefix) :]
                break
        errors.append(FieldError(pointer, error.message))
    detail = "The retry's graph is not valid: " + "; ".join(
        f"{e.pointer}: {e.message}" for e in errors
    )
    return InvalidGraph(detail, errors=errors)


def unknown_params(graph: Graph, params: dict[str, dict[str, Any]]) -> None:
    """A param name the node's type does not have is refused (400 at
    ``/params/<node>/<name>``). A saved graph's node data may hold fields of the editor's
    beside the params, which the graph check ignores; a retry names params on purpose, and
    a misspelt one would otherwise change nothing."""
    errors: list[FieldError] = []
    for node_id, values in params.items():
        spec = graph.nodes[node_id].node.spec
        known = spec.params.model_fields
        for name in values:
            if name not in known:
                listed = ", ".join(known) or "none"
                message = f"{spec.type} has no param {name!r} (its params: {listed})"
                errors.append(FieldError(f"/params/{_escape(node_id)}/{_escape(name)}", message))
    if errors:
        raise InvalidRequest.listing("", errors)


def reusable(
    graph: Graph,
    completed: dict[str, str],
    artifacts: dict[str, Any],
    changed: set[str],
) -> dict[str, ArtifactInfo]:
    """The nodes a retry reuses, with their artifacts: completed in the retried run
    (``completed``: node id -> artifact id), params unchanged, artifact still stored
    (``artifacts``: rows by id), and every node feeding them reused too."""
    reuse: dict[str, ArtifactInfo] = {}
    # A node with branches (an If, a Switch) runs again: which way it went is not part of
    # its artifact, and it costs nothing (engine/branches.py). A completed node with an
    # error edge is reused: it took its output, not ``error``.
    deciding = branches.with_branches(graph)
    for node_id in graph.order:
        artifact_id = completed.get(node_id)
        row = artifacts.get(artifact_id) if artifact_id else None
        if row is None or node_id in changed or node_id in graph.batches.regions:
            # A ForEach runs again (it is instant): its items are added to the run only
            # when it completes in it, so nothing of a batch region is reused.
            continue
        if node_id in deciding:
            continue
        sources = (s for srcs in graph.inputs[node_id].values() for s in srcs)
        if all(source in reuse for source in sources):
            reuse[node_id] = artifact_info(row)
    return reuse


@dataclass(frozen=True)
class RetryPlan:
    """A retry as read and checked: the workflow's version, the graph it runs, and the
    source (its ``reuse`` filled in)."""

    workflow_id: str
    workflow_version: datetime
    graph: Graph
    source: RetrySource


def _edges_into(graph_json: dict[str, Any]) -> dict[str, set[tuple[Any, ...]]]:
    edges: dict[str, set[tuple[Any, ...]]] = {}
    raw_edges = graph_json.get("edges")
    for edge in raw_edges if isinstance(raw_edges, list) else []:
        if isinstance(edge, dict):
            wiring = (edge.get("source"), edge.get("sourceHandle"), edge.get("targetHandle"))
            edges.setdefault(str(edge.get("target")), set()).add(wiring)
    return edges


def edited_since(graph: Graph, graph_json: dict[str, Any], ran: dict[str, Any]) -> set[str]:
    """The nodes of ``graph`` (the workflow as saved now, ``graph_json`` its JSON) that the
    retried run's graph ``ran`` does not have as they are: missing there, of another type,
    with other params, or wired from other outputs. Fields the editor keeps beside the
    params (a label, a colour) change nothing."""
    before, now = _nodes(ran), _nodes(graph_json)
    now_edges, ran_edges = _edges_into(graph_json), _edges_into(ran)
    edited: set[str] = set()
    for node_id, planned in graph.nodes.items():
        old = before.get(node_id)
        spec = planned.node.spec
        if old is None or old.get("type") != spec.type:
            edited.add(node_id)
            continue
        now_data, old_data = _data(now[node_id]), _data(old)
        params = spec.params.model_fields
        if {k: v for k, v in now_data.items() if k in params} != {
            k: v for k, v in old_data.items() if k in params
        } or now_edges.get(node_id, set()) != ran_edges.get(node_id, set()):
            edited.add(node_id)
    return edited


def _nodes(graph_json: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    raw_nodes = graph_json.get("nodes")
    listed = raw_nodes if isinstance(raw_nodes, list) else []
    return {raw.get("id"): raw for raw in listed if isinstance(raw, dict)}


def _data(raw: dict[str, Any]) -> dict[str, Any]:
    data = raw.get("data")
    return data if isinstance(data, dict) else {}


def plan(
    conn: Connection,
    account_id: str,
    workflow_id: str,
    run_id: str,
    params: dict[str, dict[str, Any]] | None,
    current: bool,
    check: Callable[[Any], Graph],
) -> RetryPlan:
    """Read the retried run and plan its retry: 404 when it is not the account's run of
    that workflow (or the workflow is deleted), 409 while it has not failed or been
    cancelled, 400 when a node named in ``params`` does not exist or the graph with the new
    params does not validate (``check``: the server's graph check, raising InvalidGraph).
    ``current``: the retry runs the workflow as saved now, not the run's own graph; a node
    edited since the run (``edited_since``) runs again like a node given new params."""
    row = run_store.retry_source(conn, account_id, workflow_id, run_id)
    if row is None:
        raise NotFound("No such run of this workflow.")
    if row.status not in RETRYABLE:
        raise Conflict(f"Only a failed or cancelled run can be retried; this run is {row.status}.")
    base = row.current_graph if current else row.graph_json
    graph_json, positions = with_params(base, params or {})
    try:
        graph = check(graph_json)
    except InvalidGraph as problem:
        raise blame_params(problem, positions) from None
    unknown_params(graph, params or {})
    changed = set(positions)
    if current:
        changed |= edited_since(graph, graph_json, row.graph_json)
    nodes = run_store.node_states(conn, run_id)
    done = NodeStatus.COMPLETED
    completed = {n.node_id: n.artifact_id for n in nodes if n.status == done and n.artifact_id}
    rows = artifact_store.by_ids(conn, list(set(completed.values())))
    reuse = reusable(graph, completed, rows, changed)
    version_number = None if params else (row.current_version if current else row.ran_version)
    source = RetrySource(row.id, graph_json, row.input, reuse, version_number)
    return RetryPlan(row.workflow_id, row.workflow_version, graph, source)
