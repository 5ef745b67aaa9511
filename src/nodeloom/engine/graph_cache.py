"""Checked graphs by (workflow id, updated_at), so that execute validates a stored graph
once, not on every run; and the check a stored graph must pass to run here now.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.engine import subworkflows
from nodeloom.engine.graph import Graph
from nodeloom.engine.graph_checks import Children, unavailable_nodes, validate_graph
from nodeloom.errors import (
    InvalidGraph,
)
from nodeloom.nodes.registry import Registry
from nodeloom.settings import Settings

WorkflowGraph = tuple[datetime, Graph]


class GraphCache:
    """Checked graphs by (workflow id, updated_at): execute validates a stored graph once,
    not on every run (the catalog is fixed for the life of the process)."""

    def __init__(self, registry: Registry, settings: Settings, size: int = 512) -> None:
        self._registry = registry
        self._settings = settings
        self._size = size
        self._items: OrderedDict[tuple[str, datetime], Graph] = OrderedDict()
        # The version of each workflow cached last: what an execute expects to find current
        # (engine/look_ahead.py reads its credential's kind with the version).
        self._newest: dict[str, datetime] = {}

    def peek(self, workflow_id: str, updated_at: datetime) -> Graph | None:
        key = (workflow_id, updated_at)
        graph = self._items.get(key)
        if graph is not None:
            self._items.move_to_end(key)
        return graph

    def newest(self, workflow_id: str) -> WorkflowGraph | None:
        """The version of ``workflow_id`` cached last, with its graph, if still cached."""
        updated_at = self._newest.get(workflow_id)
        graph = self._items.get((workflow_id, updated_at)) if updated_at is not None else None
        return (updated_at, graph) if graph is not None and updated_at is not None else None

    def children(
        self, conn: Connection, account_id: str, graph_json: Any, workflow_id: str | None
    ) -> Children:
        """The sub-workflows ``graph_json`` names, resolved (engine/subworkflows.py)."""
        return subworkflows.resolve(
            conn, account_id, graph_json, self._registry, self._settings, workflow_id
        )

    def get(
        self,
        workflow_id: str,
        updated_at: datetime,
        graph_json: Any,
        children: Children | None = None,
    ) -> Graph:
        if children:
            # Its checked graph depends on its children's versions too: never cached, so a
            # child saved since is seen at once (its run resolves them again anyway).
            return self.check(graph_json, children)
        graph = self.peek(workflow_id, updated_at)
        if graph is not None:
            return graph
        checked = self.check(graph_json)
        self._items[(workflow_id, updated_at)] = checked
        newest = self._newest.get(workflow_id)
        if newest is None or newest <= updated_at:
            self._newest[workflow_id] = updated_at
        if len(self._items) > self._size:
            (evicted, version), _ = self._items.popitem(last=False)
            if self._newest.get(evicted) == version:
                del self._newest[evicted]
        return checked

    def check(self, graph_json: Any, children: Children | None = None) -> Graph:
        """``graph_json`` checked against the catalog and what this server can run now
        (InvalidGraph otherwise), without keeping it (a retry's graph is its own)."""
        checked = validate_graph(graph_json, self._registry, self._settings, children)
        if isinstance(checked, list):
            cycle = next((p for p in checked if subworkflows.is_cycle(p.message)), None)
            if cycle is not None:
                raise InvalidGraph(
                    f"The stored workflow cannot run: {cycle.message}.", errors=checked
                )
            raise InvalidGraph(
                "The stored workflow no longer validates against this server's node catalog.",
                errors=checked,
            )
        # Never cached: such a workflow is checked, and refused, on every execute.
        unavailable = unavailable_nodes(graph_json, self._registry, self._settings)
        if unavailable:
            raise InvalidGraph.listing(
                "The workflow uses nodes that cannot run on this server now: ", unavailable
            )
        return checked
