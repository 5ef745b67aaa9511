"""How much work one run may make, its sub-workflows' included (``run_max_work``).

A run's work is its node runs and the child runs it starts; a child run's work is the
parent's too. Credits bound paid work, but free nodes (a ForEach, a TextTemplate, a
Workflow node) cost nothing, and the bounds that hold per level multiply: a ForEach of
1,000 items running a Workflow whose child has a ForEach of 1,000 items, and so on 8 deep,
is 1,000^8 node runs from one call of an account with no credits. So the whole tree of
runs under one execute shares one bound, checked where work is added:

- **at execute**: the run's nodes once its ForEach counts known from the input are applied,
  and one child run per ``Workflow`` node: over the bound is 400 ``invalid_request``, no run
  (``known_work``);
- **when a ForEach completes**: the node runs its items add (``items * (region + 1)``);
- **when a Workflow node starts its child**: the child run and its drawn nodes.

The last two count the tree's rows as they are (the root found through ``parent_run_id``,
its descendants through the same link) and fail the node with ``run_too_large`` when the
addition would pass the bound. The count reads committed rows without a lock: steps of the
same tree committing at the same moment each see the others' rows only once committed, so
the bound can be passed by what those steps add together (at most ``concurrency`` of them),
never multiplied.
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import NodeRun, Run, Workflow
from nodeloom.engine.graph import Graph
from nodeloom.nodes.subworkflow import WORKFLOW_TYPE

RUN_TOO_LARGE = "run_too_large"

_RUNS = cast(sa.Table, Run.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)


def known_work(graph: Graph) -> int:
    """The work a run of ``graph`` (expanded with the ForEach counts known) makes for sure:
    its node runs and a child run per Workflow node."""
    return len(graph.nodes) + sum(1 for n in graph.nodes.values() if n.type == WORKFLOW_TYPE)


def tree_work(conn: Connection, run_id: str) -> int:
    """Node runs and runs, so far, of the tree of runs ``run_id`` belongs to (0 when the run
    is not stored yet: it is being accepted)."""
    up = (
        sa.select(_RUNS.c.id, _RUNS.c.parent_run_id)
        .where(_RUNS.c.id == run_id)
        .cte("up", recursive=True)
    )
    up = up.union_all(
        sa.select(_RUNS.c.id, _RUNS.c.parent_run_id).where(_RUNS.c.id == up.c.parent_run_id)
    )
    root = sa.select(up.c.id).where(up.c.parent_run_id.is_(None)).scalar_subquery()
    down = sa.select(_RUNS.c.id).where(_RUNS.c.id == root).cte("down", recursive=True)
    down = down.union_all(sa.select(_RUNS.c.id).where(_RUNS.c.parent_run_id == down.c.id))
    runs = sa.select(sa.func.count()).select_from(down).scalar_subquery()
    nodes = (
        sa.select(sa.func.count())
        .select_from(_NODES)
        .where(_NODES.c.run_id.in_(sa.select(down.c.id)))
        .scalar_subquery()
    )
    return int(conn.execute(sa.select(runs + nodes)).scalar_one())


def child_work(conn: Connection, workflow_id: str) -> int:
    """What starting a run of ``workflow_id`` adds at once: the run and its drawn nodes
    (a ForEach's items are counted when it completes)."""
    graph_json = conn.execute(
        sa.select(_WORKFLOWS.c.graph_json).where(_WORKFLOWS.c.id == workflow_id)
    ).scalar()
    nodes = graph_json.get("nodes") if isinstance(graph_json, dict) else None
    return 1 + (len(nodes) if isinstance(nodes, list) else 0)


def over(limit: int, so_far: int, adding: int) -> str | None:
    """Why adding ``adding`` to ``so_far`` is refused, or None when it fits."""
    if so_far + adding <= limit:
        return None
    return (
        f"this run and its sub-workflows would make {so_far + adding} node and child runs, "
        f"more than the server allows for one run ({limit}; it has {so_far})"
    )
