"""The statements a batch is written with, built once at import: building a statement costs
more than executing it. Node updates name their allowed from-states (``states.NODE_FROM``).
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa

from nodeloom.db.models import (
    Account,
    Artifact,
    CallbackDelivery,
    CreditEntry,
    NodeRun,
    Run,
    RunEvent,
    Webhook,
    Workflow,
)
from nodeloom.db.prepared import Prepared
from nodeloom.engine import credits
from nodeloom.states import FINISHED_RUN_STATES, NODE_FROM, RUN_FROM, NodeStatus, RunStatus


def _t(model: type[Any]) -> sa.Table:
    table: sa.Table = model.__table__
    return table


def _from(status: NodeStatus) -> list[str]:
    return [s.value for s in NODE_FROM[status]]


# Statements are built once: building a statement costs more than executing it.
_NODE = _t(NodeRun)


_RUN = _t(Run)


_ACCOUNT = _t(Account)


_LEDGER = _t(CreditEntry)


_ARTIFACT = _t(Artifact)


_EVENTS = _t(RunEvent)


_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)


def _nodes_into(status: NodeStatus, **values: Any) -> Prepared:
    """The run's ``ids`` nodes moved into ``status`` from the states it may follow, with
    ``values`` set beside it."""
    return Prepared(
        sa.update(_NODE)
        .where(
            _NODE.c.run_id == sa.bindparam("run"),
            _NODE.c.node_id.in_(_IDS),
            _NODE.c.status.in_(_from(status)),
        )
        .values(status=status.value, **values)
    )


QUEUE = _nodes_into(
    NodeStatus.QUEUED,
    queued_at=sa.bindparam("at", type_=_NODE.c.queued_at.type),
    started_at=None,
    claimed_by=None,
)


START = _nodes_into(
    NodeStatus.RUNNING,
    started_at=sa.bindparam("at", type_=_NODE.c.started_at.type),
    claimed_by=sa.bindparam("claimed_by"),
    attempts=_NODE.c.attempts + 1,
)


def _end_values(status: NodeStatus) -> dict[str, Any]:
    return {
        "status": status.value,
        "finished_at": sa.bindparam("at", type_=_NODE.c.finished_at.type),
        "artifact_id": sa.bindparam("artifact"),
        "credits_used": sa.bindparam("credits"),
        "cached": sa.bindparam("cached"),
        "error": sa.bindparam("error", type_=_NODE.c.error.type),
        "ports": sa.bindparam("ports", type_=_NODE.c.ports.type),
    }


def _one_node(from_states: list[str]) -> Any:
    """One node row in one of ``from_states``. The states are bound one by one, not as an
    expanding IN list: these statements run as executemany, which takes its SQL as is."""
    return (
        _NODE.c.run_id == sa.bindparam("run"),
        _NODE.c.node_id == sa.bindparam("node"),
        _NODE.c.status.in_([sa.literal(state) for state in from_states]),
    )


def _end_statement(status: NodeStatus) -> Prepared:
    return Prepared(sa.update(_NODE).where(*_one_node(_from(status))).values(**_end_values(status)))


def _through_from(status: NodeStatus) -> list[str]:
    """The states a node may be in to be started and then end in ``status``: those a start
    may leave, as long as ``status`` may follow running."""
    assert NodeStatus.RUNNING in NODE_FROM[status], f"{status} cannot follow running"
    return _from(NodeStatus.RUNNING)


def _through_statement(status: NodeStatus) -> Prepared:
    """Started and ended within one step (an instant node, a cache hit): both transitions
    in one UPDATE, checked against the from-states of the first."""
    return Prepared(
        sa.update(_NODE)
        .where(*_one_node(_through_from(status)))
        .values(
            started_at=sa.bindparam("started", type_=_NODE.c.started_at.type),
            claimed_by=sa.bindparam("claimed_by"),
            attempts=_NODE.c.attempts + 1,
            **_end_values(status),
        )
    )


def _bulk_statement(status: NodeStatus) -> Prepared:
    return _nodes_into(
        status,
        finished_at=sa.bindparam("at", type_=_NODE.c.finished_at.type),
        error=sa.bindparam("error", type_=_NODE.c.error.type),
    )


END = {status: _end_statement(status) for status in (NodeStatus.COMPLETED, NodeStatus.FAILED)}


THROUGH = {
    status: _through_statement(status) for status in (NodeStatus.COMPLETED, NodeStatus.FAILED)
}


BULK = {status: _bulk_statement(status) for status in (NodeStatus.SKIPPED, NodeStatus.CANCELLED)}


def _run_end_statement(status: RunStatus) -> Prepared:
    return Prepared(
        sa.update(_RUN)
        .where(
            _RUN.c.id == sa.bindparam("run"), _RUN.c.status.in_([s.value for s in RUN_FROM[status]])
        )
        .values(
            status=status.value,
            finished_at=sa.bindparam("at", type_=_RUN.c.finished_at.type),
            error=sa.bindparam("error", type_=_RUN.c.error.type),
            credits_used=sa.bindparam("used"),
        )
    )


RUN_END = {status: _run_end_statement(status) for status in FINISHED_RUN_STATES}


INSERT_LEDGER = Prepared(sa.insert(_LEDGER))


INSERT_NODES = Prepared(sa.insert(_NODE))


_WORKFLOW = _t(Workflow)


_NEW_RUN_VALUES = (
    "id",
    "account_id",
    "workflow_id",
    "webhook_id",
    "status",
    "trigger",
    "use_cache",
    "estimated_credits",
    "credits_used",
    "error",
    "created_at",
    "finished_at",
    "cancel_requested",
    "driver",
    "input",
    "retried_from",
    "parent_run_id",
    "parent_node_id",
)


def _insert_run_statement(*also: sa.ColumnElement[bool]) -> sa.Insert:
    """The run row with a copy of the workflow's graph and its version number, only if the
    workflow is still the version that was read (and not deleted) and ``also`` holds: the
    checks and the copy in one statement."""
    return sa.insert(_RUN).from_select(
        [*_NEW_RUN_VALUES, "graph_json", "workflow_version"],
        sa.select(
            *(sa.bindparam(name, type_=_RUN.c[name].type) for name in _NEW_RUN_VALUES),
            _WORKFLOW.c.graph_json,
            _WORKFLOW.c.version,
        ).where(
            _WORKFLOW.c.id == sa.bindparam("workflow_id"),
            _WORKFLOW.c.account_id == sa.bindparam("account_id"),
            _WORKFLOW.c.updated_at == sa.bindparam("version", type_=_WORKFLOW.c.updated_at.type),
            _WORKFLOW.c.deleted_at.is_(None),
            *also,
        ),
    )


INSERT_RUN = Prepared(_insert_run_statement())


_WEBHOOK = _t(Webhook)


# A webhook trigger's run row: as INSERT_RUN, and only while the webhook is as it was read
# (WebhookAsRead): every check of a trigger that the database could have changed since is
# made again here, in the statement that creates the run.
_WEBHOOK_AS_READ = (
    sa.exists().where(
        _WEBHOOK.c.id == sa.bindparam("as_read_webhook"),
        _WEBHOOK.c.workflow_id == _WORKFLOW.c.id,
        _WEBHOOK.c.active.is_(True),
        _WEBHOOK.c.deleted_at.is_(None),
        _WEBHOOK.c.secret_encrypted.is_not_distinct_from(
            sa.bindparam("as_read_secret", type_=_WEBHOOK.c.secret_encrypted.type)
        ),
        _WEBHOOK.c.callback_url.is_not_distinct_from(
            sa.bindparam("as_read_callback", type_=_WEBHOOK.c.callback_url.type)
        ),
    ),
    sa.exists().where(
        _ACCOUNT.c.id == _WORKFLOW.c.account_id,
        _ACCOUNT.c.plan == sa.bindparam("as_read_plan", type_=_ACCOUNT.c.plan.type),
        _ACCOUNT.c.disabled_at.is_(None),
    ),
)


INSERT_WEBHOOK_RUN = Prepared(_insert_run_statement(*_WEBHOOK_AS_READ))


# The run row of an acceptance written in one statement (``created_alone``), which also
# makes the two checks the transaction makes with statements of their own: no output of
# the run is stored already (its cache keys ``k0``..``kN``: one index probe each, as the
# transaction's look-up; ``= ANY(array)`` left PostgreSQL's generic plan scanning every
# artifact of the account), and the balance covers the estimate as of the statement's start
# (the hold itself is checked again on the locked row, ``credits.HOLD_IF_CREATED``). Either
# failing inserts nothing; the transaction then does what it does (reuses the outputs,
# refuses with 402).
_COVERED = sa.exists().where(
    credits.BALANCES.c.account_id == sa.bindparam("account_id"),
    credits.BALANCES.c.credits_balance >= sa.bindparam("estimated_credits"),
)


def _none_stored(index: int) -> sa.ColumnElement[bool]:
    return ~sa.exists().where(
        _ARTIFACT.c.account_id == sa.bindparam("account_id"),
        _ARTIFACT.c.cache_key.is_not(None),  # the index's condition
        _ARTIFACT.c.cache_key == sa.bindparam(f"k{index}", type_=_ARTIFACT.c.cache_key.type),
    )


def _still_newest(index: int) -> sa.ColumnElement[bool]:
    """The artifact ``a<index>`` is still the account's newest of key ``h<index>``: the one
    the look-up would find (one index probe), for an output known stored (ADR 0029)."""
    newest = (
        sa.select(_ARTIFACT.c.id)
        .where(
            _ARTIFACT.c.account_id == sa.bindparam("account_id"),
            _ARTIFACT.c.cache_key.is_not(None),  # the index's condition
            _ARTIFACT.c.cache_key == sa.bindparam(f"h{index}", type_=_ARTIFACT.c.cache_key.type),
        )
        .order_by(_ARTIFACT.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    return newest == sa.bindparam(f"a{index}", type_=_ARTIFACT.c.id.type)


@functools.cache
def insert_run_alone(webhook: bool, keys: int, hits: int = 0) -> Prepared:
    also = _WEBHOOK_AS_READ if webhook else ()
    return Prepared(
        _insert_run_statement(
            *also,
            *(_none_stored(i) for i in range(keys)),
            *(_still_newest(i) for i in range(hits)),
            _COVERED,
        )
    )


# A retry's run row with its own graph, only if the workflow still exists (its version does
# not matter: a retry runs the graph of the run it retries).
INSERT_RETRY = Prepared(
    sa.insert(_RUN).from_select(
        [*_NEW_RUN_VALUES, "graph_json", "workflow_version"],
        sa.select(
            *(sa.bindparam(name, type_=_RUN.c[name].type) for name in _NEW_RUN_VALUES),
            sa.bindparam("graph_json", type_=_RUN.c.graph_json.type),
            sa.bindparam("retry_version", type_=_RUN.c.workflow_version.type),
        ).where(
            _WORKFLOW.c.id == sa.bindparam("workflow_id"),
            _WORKFLOW.c.account_id == sa.bindparam("account_id"),
            _WORKFLOW.c.deleted_at.is_(None),
        ),
    )
)


# A sub-workflow's run, linked from the node run that started it.
LINK_CHILD = Prepared(
    sa.update(_NODE)
    .where(_NODE.c.run_id == sa.bindparam("parent"), _NODE.c.node_id == sa.bindparam("node"))
    .values(child_run_id=sa.bindparam("child"))
)


ARTIFACT_EXISTS = Prepared(sa.select(_ARTIFACT.c.id).where(_ARTIFACT.c.id == sa.bindparam("id")))


INSERT_ARTIFACT = Prepared(sa.insert(_ARTIFACT))


INSERT_EVENTS = Prepared(sa.insert(_EVENTS))


INSERT_CALLBACK = Prepared(sa.insert(_t(CallbackDelivery)))
