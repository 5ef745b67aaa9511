"""The provider job a provider node waits on, kept on its node run (``node_runs.provider_job``;
see nodes/adapters/policy.py): functions of a Core connection, run by ``db.read`` /
``db.write``."""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import NodeRun, Run

_NODES = cast(sa.Table, NodeRun.__table__)
_RUNS = cast(sa.Table, Run.__table__)


def get(conn: Connection, run_id: str, node_id: str) -> dict[str, Any] | None:
    value = conn.execute(
        sa.select(_NODES.c.provider_job).where(
            _NODES.c.run_id == run_id, _NODES.c.node_id == node_id
        )
    ).scalar()
    return value if isinstance(value, dict) else None


def remember(conn: Connection, run_id: str, node_id: str, job: dict[str, Any] | None) -> None:
    conn.execute(
        sa.update(_NODES)
        .where(_NODES.c.run_id == run_id, _NODES.c.node_id == node_id)
        .values(provider_job=job)
    )


def run_cancelled(conn: Connection, run_id: str) -> bool:
    value = conn.execute(sa.select(_RUNS.c.cancel_requested).where(_RUNS.c.id == run_id)).scalar()
    return bool(value)
