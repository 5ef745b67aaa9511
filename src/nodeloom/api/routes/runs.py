"""Execute a workflow, read runs, cancel a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Depends, Header, Query, Request, Response, status
from pydantic import BaseModel
from sqlalchemy.engine import Connection

from nodeloom.api.body import body_doc, read_json, validated
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import CursorQuery, LimitQuery, page_of
from nodeloom.api.remote_media import bring_media
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes.assets import execute_doc, execute_form
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.api.uploads import is_multipart
from nodeloom.engine import callbacks, media_lengths
from nodeloom.engine.graph import costs
from nodeloom.engine.graph_checks import Children
from nodeloom.engine.new_run import batch_items, check_credentials
from nodeloom.engine.run_request import RunRequest
from nodeloom.errors import Conflict, NotFound
from nodeloom.nodes.approval import APPROVAL_TYPE
from nodeloom.schemas.records import run_record, run_summary
from nodeloom.schemas.runs import (
    ExecuteRequest,
    ExecuteResponse,
    NodeEstimate,
    RetryRequest,
    RetryResponse,
    RunEstimate,
    RunListItem,
    RunOut,
    RunStatusName,
    RunSummary,
    RunTrigger,
)
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.store import Record
from nodeloom.store import accounts as account_store
from nodeloom.store import approvals as approval_store
from nodeloom.store import runs as run_store
from nodeloom.store import workflows as workflow_store

_Body = TypeVar("_Body", bound=BaseModel)
router = APIRouter(route_class=GuardedRoute, tags=["runs"])

MAX_EXECUTE_BODY = 1024 * 1024
IdempotencyKeyHeader = Annotated[
    str | None,
    Header(max_length=255, description="Repeat-safe: the same key within 24 h replays."),
]
KEY_REUSED: dict[int | str, dict[str, Any]] = {
    422: {
        "description": "Idempotency-Key already used for a different request "
        "(idempotency_key_reused)"
    }
}


def _run_location(workflow_id: str, run_id: str) -> str:
    return f"/api/v1/workflows/{quote(workflow_id, safe='')}/runs/{run_id}"


@router.post(
    "/workflows/{workflow_id}/execute",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ExecuteResponse,
    openapi_extra=execute_doc(ExecuteRequest),
    responses={
        402: {"description": "Insufficient credits (insufficient_credits)"},
        **KEY_REUSED,
        404: {"description": "No such workflow (not_found)"},
    },
)
async def execute(
    workflow_id: str,
    request: Request,
    response: Response,
    principal: PrincipalDep,
    ctx: CtxDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> dict[str, Any]:
    """Start a run. The body is optional: ``{"input": {...}, "cache": true}``; or
    multipart/form-data with a JSON ``input`` part and files named by their input keys,
    each made an asset first (docs/media-inputs.md)."""
    if is_multipart(request):
        body = await execute_form(request, ctx, principal)
    else:
        body = await _body(request, ExecuteRequest)
    body = await bring_media(ctx, principal, workflow_id, body)
    if body.callback_url is not None:
        await callbacks.check_url(ctx.settings, body.callback_url, "/callback_url")
        await ctx.db.read(
            lambda c: callbacks.require_secret(c, principal.account_id, "/callback_url")
        )
    run = RunRequest(
        account_id=principal.account_id,
        workflow_id=workflow_id,
        run_input=body.input,
        use_cache=body.cache,
        plan=principal.plan.value,
        idempotency_key=idempotency_key,
        trigger=body.trigger,
        callback_url=body.callback_url,
    )
    return await _accept(ctx, response, run)


async def _accept(ctx: AppContext, response: Response, run: RunRequest) -> dict[str, Any]:
    """Accept the run and answer as an execute does: the new run's ``Location``, and
    ``Idempotent-Replayed`` when the key's earlier answer is given again."""
    accepted = await ctx.acceptor.accept(run)
    answer = accepted.answer
    if accepted.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = _run_location(run.workflow_id, answer["run_id"])
    return answer


async def _body(request: Request, model: type[_Body]) -> _Body:
    """The optional JSON body of an execute or a retry, validated (400 with pointers)."""
    return validated(model, await read_json(request, MAX_EXECUTE_BODY, allow_empty=True))


@router.post(
    "/workflows/{workflow_id}/runs/{run_id}/retry",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RetryResponse,
    openapi_extra=body_doc(RetryRequest, required=False),
    responses={
        400: {"description": "A node in params does not exist, or its params are invalid"},
        402: {"description": "Insufficient credits for the nodes that run again"},
        404: {"description": "No such run of this workflow (not_found)"},
        409: {"description": "The run has not failed and was not cancelled (conflict)"},
        **KEY_REUSED,
    },
)
async def retry_run(
    workflow_id: str,
    run_id: str,
    request: Request,
    response: Response,
    principal: PrincipalDep,
    ctx: CtxDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> dict[str, Any]:
    """Retry a failed or cancelled run from where it stopped: a new run of the same graph
    (or, with ``"graph": "current"``, of the workflow as saved now) and input that reuses
    every unchanged completed node's artifact (uncharged, ``cached``) and runs the rest.
    The body is optional: ``{"params": {"<node id>": {...}}, "cache": true}``."""
    body = await _body(request, RetryRequest)
    run = RunRequest(
        account_id=principal.account_id,
        workflow_id=workflow_id,
        run_input=None,
        use_cache=body.cache,
        plan=principal.plan.value,
        idempotency_key=idempotency_key,
        trigger=body.trigger,
        retry_of=run_id,
        retry_params=body.params,
        retry_current=body.graph == "current",
    )
    return await _accept(ctx, response, run)


@router.get("/workflows/{workflow_id}/runs/{run_id}", response_model=RunOut)
async def get_run(
    workflow_id: str, run_id: str, principal: PrincipalDep, ctx: CtxDep
) -> OrjsonResponse:
    """The run with every node. Built straight from two indexed reads (this endpoint is
    polled), so the body is encoded once, without a validation pass."""

    def read(conn: Connection) -> tuple[dict[str, Any], set[tuple[str, str]]] | None:
        run = run_store.run(conn, principal.account_id, workflow_id, run_id)
        if run is None:
            return None
        # Only a run that failed or was cancelled can have been retried: a poll of a
        # running run costs no statement more.
        retryable = run.status in (RunStatus.FAILED, RunStatus.CANCELLED)
        retries = run_store.retries(conn, run_id) if retryable else []
        nodes = run_store.node_runs(conn, run_id)
        # Nor does one without a running Approval node: only those may wait for a person.
        asking = any(n.type == APPROVAL_TYPE and n.status == NodeStatus.RUNNING for n in nodes)
        waiting = approval_store.pending_in_runs(conn, [run_id]) if asking else set()
        return run_record(run, nodes, retries), waiting

    found = await ctx.db.read(read)
    if found is None:
        raise NotFound("No such run of this workflow.")
    body, waiting = found
    for node in body["node_runs"]:
        if node["status"] == NodeStatus.RUNNING and (run_id, node["node_id"]) in waiting:
            node["status"] = NodeStatus.WAITING.value
    return OrjsonResponse(body)


StatusQuery = Annotated[RunStatusName | None, Query(alias="status")]
TriggerQuery = Annotated[
    RunTrigger | None,
    Query(description="Only runs started this way: api, webhook, editor, schedule or workflow"),
]


@dataclass(frozen=True)
class RunListQuery:
    """The paging and filter parameters both run lists take."""

    limit: int
    cursor: str | None
    status: str | None
    trigger: str | None


async def run_list_query(  # async: a plain def would run in a worker thread
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
    status_filter: StatusQuery = None,
    trigger: TriggerQuery = None,
) -> RunListQuery:
    return RunListQuery(limit, cursor, status_filter, trigger)


RunListDep = Annotated[RunListQuery, Depends(run_list_query)]


@router.get("/workflows/{workflow_id}/runs", response_model=list[RunSummary])
async def list_runs(
    workflow_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep, query: RunListDep
) -> OrjsonResponse:
    """Newest first, paged; ``?status=running|completed|failed`` and ``?trigger=`` filter."""

    def read(conn: Connection) -> tuple[list[Record], dict[str, int]]:
        if not run_store.workflow_exists(conn, principal.account_id, workflow_id):
            raise NotFound("No such workflow.")
        return _runs_page(conn, principal.account_id, workflow_id, query)

    return _runs_response(request, workflow_id, query, *await ctx.db.read(read))


@router.get("/runs", response_model=list[RunListItem])
async def list_all_runs(
    request: Request, principal: PrincipalDep, ctx: CtxDep, query: RunListDep
) -> OrjsonResponse:
    """Every run of the account (of workflows not deleted), newest first, paged, each with
    its workflow's name; filters as on a workflow's run list."""
    page = await ctx.db.read(lambda c: _runs_page(c, principal.account_id, None, query))
    return _runs_response(request, None, query, *page)


def _runs_page(
    conn: Connection, account_id: str, workflow_id: str | None, query: RunListQuery
) -> tuple[list[Record], dict[str, int]]:
    """``limit + 1`` rows, and what the running ones among them were charged so far."""
    rows = run_store.page(
        conn, account_id, workflow_id, query.status, query.limit, query.cursor, query.trigger
    )
    running = [r.id for r in rows[: query.limit] if r.status == "running"]
    return rows, run_store.credits_so_far(conn, running)


def _runs_response(
    request: Request,
    workflow_id: str | None,
    query: RunListQuery,
    rows: list[Record],
    so_far: dict[str, int],
) -> OrjsonResponse:
    rows, headers = page_of(request, rows, query.limit)
    body = []
    for row in rows:
        item = run_summary(row, so_far.get(row.id))
        if workflow_id is None:
            item["workflow_name"] = row.workflow_name
        body.append(item)
    return OrjsonResponse(body, headers=headers)


async def _estimate(
    ctx: CtxDep, account_id: str, workflow_id: str, run_input: dict[str, Any] | None = None
) -> RunEstimate:
    """What execute would hold for a run of the workflow as saved now with ``run_input``,
    node by node, checked as execute checks it (the graph against this server's catalog,
    the credentials it names, a batch the input makes too large), without holding,
    charging or creating anything."""

    def read(conn: Connection) -> tuple[Record, Record, Children]:
        row = workflow_store.get(conn, account_id, workflow_id)
        if row is None:
            raise NotFound("No such workflow.")
        children = ctx.graphs.children(conn, account_id, row.graph_json, row.id)
        return row, account_store.by_id(conn, account_id), children

    row, account, children = await ctx.db.read(read)
    graph = ctx.graphs.get(row.id, row.updated_at, row.graph_json, children)
    await check_credentials(ctx.db, account_id, graph)
    items = batch_items(graph, run_input) if graph.batches else {}
    fed = graph.length_feeds
    lengths = (
        await ctx.db.read(lambda c: media_lengths.lengths(c, account_id, fed, run_input))
        if fed
        else {}
    )
    parts = costs(graph, items, lengths)
    nodes = [
        NodeEstimate(node_id=n.id, type=n.type, credits=parts[n.id])
        for n in sorted(graph.nodes.values(), key=lambda n: n.index)
    ]
    total = graph.estimate_credits(items, lengths)
    balance = account.credits_balance if account else 0
    return RunEstimate(
        estimated_credits=total,
        credits_balance=balance,
        sufficient=balance >= total,
        workflow_version=row.version,
        nodes=nodes,
    )


@router.get("/workflows/{workflow_id}/estimate", response_model=RunEstimate)
async def estimate(workflow_id: str, principal: PrincipalDep, ctx: CtxDep) -> RunEstimate:
    """What a run of the saved graph would hold, and the balance, before anything starts
    (the web app shows both before a run is confirmed). The same answer as POST without
    an input."""
    return await _estimate(ctx, principal.account_id, workflow_id)


@router.post(
    "/workflows/{workflow_id}/estimate",
    response_model=RunEstimate,
    openapi_extra=body_doc(ExecuteRequest, required=False),
    responses={
        400: {"description": "Invalid body, or a graph that cannot run here (invalid_graph)"},
        404: {"description": "No such workflow (not_found)"},
    },
)
async def estimate_run(
    workflow_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep
) -> RunEstimate:
    """The credits a run with this body would hold, per node and in total, without running:
    the body is execute's (``{"input": {...}, "cache": true}``) and is checked as execute
    checks it; nothing is held, charged or created. A balance below the estimate is no
    error here (``sufficient`` is false): execute would answer 402."""
    raw = await read_json(request, MAX_EXECUTE_BODY, allow_empty=True)
    body = validated(ExecuteRequest, raw)
    return await _estimate(ctx, principal.account_id, workflow_id, body.input)


@router.post(
    "/workflows/{workflow_id}/runs/{run_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunSummary,
    responses={409: {"description": "The run has already finished (conflict)"}},
)
async def cancel_run(
    workflow_id: str, run_id: str, principal: PrincipalDep, ctx: CtxDep
) -> dict[str, Any]:
    """Ask the run to stop. It ends ``failed`` with error code ``cancelled``."""

    def cancel(conn: Connection) -> Record:
        run = run_store.owned(conn, principal.account_id, run_id, workflow_id)
        if run is None:
            raise NotFound("No such run of this workflow.")
        if run.status != "running":
            raise Conflict(f"The run has already finished ({run.status}).")
        run_store.request_cancel(conn, [run_id])
        return run

    run = await ctx.db.write(cancel)
    await ctx.dispatcher.cancel(run_id)
    return run_summary(run)
