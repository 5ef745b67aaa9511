"""Starting a run: hold the estimate, write the run and its pending nodes, in the caller's
transaction. Used by execute and by webhook triggers alike."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from nodeloom.db.models import NodeRun, Run, utcnow
from nodeloom.engine import credits
from nodeloom.engine.graph import Graph, validate_graph
from nodeloom.engine.states import NodeStatus, RunStatus
from nodeloom.errors import InvalidGraph
from nodeloom.nodes.registry import Registry
from nodeloom.settings import Settings


@dataclass(frozen=True)
class Started:
    run_id: str
    estimated_credits: int
    created_at: datetime

    def response(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": RunStatus.RUNNING.value,
            "estimated_credits": self.estimated_credits,
        }


class GraphCache:
    """Checked graphs by (workflow id, updated_at): execute validates a stored graph once,
    not on every run (the catalog is fixed for the life of the process)."""

    def __init__(self, registry: Registry, settings: Settings, size: int = 512) -> None:
        self._registry = registry
        self._settings = settings
        self._size = size
        self._items: OrderedDict[tuple[str, datetime], Graph] = OrderedDict()

    def get(self, workflow_id: str, updated_at: datetime, graph_json: Any) -> Graph:
        key = (workflow_id, updated_at)
        graph = self._items.get(key)
        if graph is not None:
            self._items.move_to_end(key)
            return graph
        checked = validate_graph(graph_json, self._registry, self._settings)
        if isinstance(checked, list):
            raise InvalidGraph(
                "The stored workflow no longer validates against this server's node catalog.",
                errors=checked,
            )
        self._items[key] = checked
        if len(self._items) > self._size:
            self._items.popitem(last=False)
        return checked


async def create_run(
    session: AsyncSession,
    *,
    account_id: str,
    workflow_id: str,
    graph_json: dict[str, Any],
    graph: Graph,
    run_input: dict[str, Any] | None,
    use_cache: bool,
    webhook_id: str | None = None,
) -> Started:
    run_id = str(uuid.uuid4())
    now = utcnow()
    estimate = graph.estimate_credits()
    await credits.hold(session, account_id, run_id, estimate, now)
    await session.execute(
        sa.insert(cast(sa.Table, Run.__table__)).values(
            id=run_id,
            account_id=account_id,
            workflow_id=workflow_id,
            webhook_id=webhook_id,
            status=RunStatus.RUNNING.value,
            graph_json=graph_json,
            input=run_input,
            use_cache=use_cache,
            estimated_credits=estimate,
            credits_used=0,
            created_at=now,
            cancel_requested=False,
            event_seq=0,
        )
    )
    await session.execute(
        sa.insert(cast(sa.Table, NodeRun.__table__)),
        [
            {
                "run_id": run_id,
                "node_id": node.id,
                "position": position,
                "type": node.type,
                "status": NodeStatus.PENDING.value,
                "credits_used": 0,
                "cached": False,
                "attempts": 0,
            }
            for position, node in enumerate(graph.nodes.values())
        ],
    )
    return Started(run_id, estimate, now)
