"""Sub-workflows: a ``Workflow`` node runs another workflow of the same account as a step
(ADR 0012, nodes/subworkflow.py).

This module resolves them (``resolve``): before a graph with ``Workflow`` nodes is
validated, each child it names is read — the account's own, not deleted, transitively — and
turned into its interface (``ChildInterface``: its TextInputs' names, its one output node's
kind, its estimate). Another account's id reads as no workflow at all (404-like wording); a
chain that comes back to a workflow already on it is a cycle; either is a problem at the
node's ``data/workflow_id``. ``graph_checks.validate_graph`` takes the result as data and stays
pure. Running a ``Workflow`` node's child is engine/child_runs.py.
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.dialect import serialize
from nodeloom.db.models import Workflow
from nodeloom.engine.graph import Graph
from nodeloom.engine.graph_checks import Children, validate_graph
from nodeloom.errors import FieldError, InvalidGraph
from nodeloom.nodes.registry import Registry
from nodeloom.nodes.subworkflow import WORKFLOW_TYPE, ChildInterface
from nodeloom.nodes.text import TextInputParams
from nodeloom.settings import Settings

# Workflows nested deeper than this are refused (a bound on resolving, not a cycle).
MAX_DEPTH = 8

_WORKFLOWS = cast(sa.Table, Workflow.__table__)


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
