"""What an execute reads before its acceptance, in one statement instead of three.

An execute of a stored workflow's current version needs, before the acceptance transaction:
the answer stored for its Idempotency-Key (if it has one), the workflow's current version
(whose checked graph the process has cached), and the kinds of the credentials that graph
names (they must still be the account's). Each was a statement and a round trip of its own;
on PostgreSQL a round trip is most of what an execute costs the API (issue #36). Here they
are one SELECT of left joins, which always returns one row.

The credential's id comes from the graph the process cached last for this workflow: the
graph of the version the statement is about to read, in all but the moment after a save.
When the version read is another one, or the graph names more than one credential, the
credentials are read after it, as before (``new_run.check_credentials``). A workflow the
account does not have, or a version not cached, takes the usual path too
(``new_run.current_workflow``), which also answers 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa

from nodeloom.db.engine import Database
from nodeloom.db.models import Credential, IdempotencyKey, Run, Workflow
from nodeloom.db.prepared import Prepared
from nodeloom.engine.graph_cache import GraphCache
from nodeloom.engine.idempotency import answer_of
from nodeloom.engine.new_run import usable
from nodeloom.engine.run_request import RunRequest, WorkflowVersion
from nodeloom.store import credentials as credential_store

_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_KEYS = cast(sa.Table, IdempotencyKey.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_CREDENTIALS = cast(sa.Table, Credential.__table__)
_ONE = sa.select(sa.literal_column("1").label("one")).subquery("one")

_AHEAD = Prepared(
    sa.select(
        _WORKFLOWS.c.updated_at.label("version"),
        _CREDENTIALS.c.kind,
        _KEYS.c.response,
        _KEYS.c.created_at,
        _KEYS.c.request_hash,
        _RUNS.c.workflow_id,
    ).select_from(
        _ONE.outerjoin(
            _WORKFLOWS,
            sa.and_(
                _WORKFLOWS.c.id == sa.bindparam("workflow"),
                _WORKFLOWS.c.account_id == sa.bindparam("account"),
                _WORKFLOWS.c.deleted_at.is_(None),
            ),
        )
        .outerjoin(
            _KEYS,
            sa.and_(
                _KEYS.c.account_id == sa.bindparam("account"),
                _KEYS.c.key == sa.bindparam("key"),
            ),
        )
        .outerjoin(_RUNS, _RUNS.c.id == _KEYS.c.run_id)
        .outerjoin(
            _CREDENTIALS,
            sa.and_(
                _CREDENTIALS.c.account_id == sa.bindparam("account"),
                _CREDENTIALS.c.id == sa.bindparam("credential"),
            ),
        )
    )
)


@dataclass(frozen=True)
class Ahead:
    """What the look-ahead found: the key's earlier answer, or else the workflow's current
    version and its credentials' kinds. None where the usual path must read it."""

    earlier: dict[str, Any] | None = None
    workflow: WorkflowVersion | None = None
    kinds: dict[str, str] | None = None


def applies(request: RunRequest) -> bool:
    """An execute of the current version: not a retry, an app's pinned version or a
    webhook trigger (which read their versions their own way)."""
    return (
        request.retry_of is None
        and request.pinned_version is None
        and request.workflow_version is None
    )


async def look_ahead(db: Database, graphs: GraphCache, request: RunRequest) -> Ahead:
    """The one statement, then what it says (``IdempotencyKeyReused`` and ``InvalidGraph``
    raised as the separate reads raised them)."""
    expected = graphs.newest(request.workflow_id)
    refs = credential_store.refs_in_graph(expected[1].nodes.values()) if expected else []
    ids = {credential_id for _, credential_id, _ in refs}
    credential = next(iter(ids)) if len(ids) == 1 else None
    params = {
        "workflow": request.workflow_id,
        "account": request.account_id,
        "key": request.idempotency_key,
        "credential": credential,
    }
    row = (await db.fetch(_AHEAD, params)).one()
    if request.idempotency_key is not None:
        earlier = answer_of(row, request)
        if earlier is not None:
            return Ahead(earlier=earlier)
    if row.version is None:
        return Ahead()  # no such workflow: the usual path says so
    graph = graphs.peek(request.workflow_id, row.version)
    if graph is None:
        return Ahead()
    workflow = WorkflowVersion(request.workflow_id, row.version, graph)
    if expected is None or expected[0] != row.version or len(ids) > 1:
        return Ahead(workflow=workflow)
    found = {credential: row.kind} if credential is not None and row.kind is not None else {}
    return Ahead(workflow=workflow, kinds=usable(refs, found))
