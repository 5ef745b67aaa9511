"""Workflows: list, create, get, update, delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from sqlalchemy.engine import Connection

from nodeloom.api.body import read_json
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import link_next
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.engine.graph import deep_checks, unavailable_nodes, validate_graph
from nodeloom.errors import FieldError, InvalidGraph, NotFound
from nodeloom.nodes.base import NodeFailure
from nodeloom.sandbox.budget import Budget
from nodeloom.schemas.common import format_timestamp
from nodeloom.schemas.workflows import (
    GraphWarning,
    WorkflowCreate,
    WorkflowOut,
    WorkflowSummary,
    WorkflowUpdate,
)
from nodeloom.store import Record, workflows
from nodeloom.store import credentials as credential_store
from nodeloom.store import runs as run_store
from nodeloom.store.paging import encode_cursor

router = APIRouter(route_class=GuardedRoute, tags=["workflows"])

MAX_WORKFLOW_BODY = 8 * 1024 * 1024
LimitQuery = Annotated[int, Query(ge=1, le=200, description="Page size (default 50)")]
CursorQuery = Annotated[str | None, Query(max_length=200, description="From a Link header")]


def _body_doc(model: type[WorkflowCreate] | type[WorkflowUpdate]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            },
        }
    }


DETAIL_PROBLEMS = 5


def _invalid_detail(problems: list[FieldError]) -> str:
    """A sentence naming the first few problems; ``errors`` carries every one of them."""
    count = len(problems)
    shown = "; ".join(f"{p.pointer}: {p.message}" for p in problems[:DETAIL_PROBLEMS])
    more = count - DETAIL_PROBLEMS
    rest = f" ... and {more} more, all listed in errors" if more > 0 else ""
    return f"The workflow is invalid ({count} problem{'s' if count != 1 else ''}): {shown}{rest}."


# Template syntax and the like: checked in a sandbox process, within a request's patience.
DEEP_CHECK_BUDGET = Budget(wall_seconds=10, cpu_seconds=10, memory_mb=256)


async def _deep_problems(ctx: AppContext, graph: Any, account_id: str) -> list[FieldError]:
    checks = deep_checks(graph, ctx.registry, max_nodes=ctx.settings.max_graph_nodes)
    if not checks:
        return []
    items = [{"type": c.type, "params": c.params} for c in checks]
    try:
        answers = await ctx.sandbox.check(items, DEEP_CHECK_BUDGET, account_id)
    except NodeFailure as exc:
        return [
            FieldError(checks[0].pointer, f"the parameters could not be checked: {exc.message}")
        ]
    return [
        FieldError(check.pointer, message)
        for check, messages in zip(checks, answers, strict=True)
        for message in messages
    ]


async def _credential_problems(ctx: AppContext, graph: Any, account_id: str) -> list[FieldError]:
    """Credentials the graph names that the account does not have (or of the wrong kind)."""

    def kinds_of(type_name: str) -> tuple[str, ...]:
        node = ctx.registry.get(type_name)
        if node is None or "credential" not in node.spec.params.model_fields:
            return ()
        return node.spec.credential_kinds

    refs = credential_store.refs_in_json(graph, kinds_of)
    if not refs:
        return []
    return await ctx.db.read(lambda c: credential_store.problems(c, account_id, refs))


async def _check_body(
    ctx: AppContext, body: Any, account_id: str, *, partial: bool
) -> tuple[str | None, dict[str, Any] | None]:
    """Name and graph from a create/update body, or InvalidGraph naming every problem."""
    problems: list[FieldError] = []
    name = body.get("name")
    if name is None and not partial:
        problems.append(FieldError("/name", "name is required"))
    elif name is not None and (not isinstance(name, str) or not name.strip() or len(name) > 500):
        problems.append(
            FieldError("/name", "name must be a non-empty string of at most 500 characters")
        )
    graph = body.get("graph_json")
    if graph is None and not partial:
        problems.append(FieldError("/graph_json", "graph_json is required"))
    elif graph is not None:
        checked = validate_graph(graph, ctx.registry, ctx.settings)
        if isinstance(checked, list):
            # A node whose package is not installed (now) is no flaw of the graph: it is
            # kept as it is and saved with a warning (``_out``), so the rest of the workflow
            # stays editable until the package returns; execute refuses it meanwhile.
            kept = {
                (w.pointer, w.message) for w in unavailable_nodes(graph, ctx.registry, ctx.settings)
            }
            problems.extend(p for p in checked if (p.pointer, p.message) not in kept)
        problems.extend(await _deep_problems(ctx, graph, account_id))
        problems.extend(await _credential_problems(ctx, graph, account_id))
    if problems:
        raise InvalidGraph(_invalid_detail(problems), errors=problems)
    return name, graph


@router.get("/workflows", response_model=list[WorkflowSummary])
async def list_workflows(
    request: Request,
    principal: PrincipalDep,
    ctx: CtxDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
    with_last_run: Annotated[
        bool,
        Query(description="Add last_run_status and last_run_at (the newest run) to each item"),
    ] = False,
) -> OrjsonResponse:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header. Items have
    the four fields of the published list unless ``?with_last_run=true`` asks for more."""
    rows = await ctx.db.read(
        lambda c: workflows.page(c, principal.account_id, limit, cursor, with_last_run)
    )
    headers: dict[str, str] = {}
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        headers["Link"] = link_next(request, encode_cursor(last.created_at, last.id))
    body: list[dict[str, Any]] = [
        {
            "id": r.id,
            "name": r.name,
            "created_at": format_timestamp(r.created_at),
            "node_count": r.node_count,
        }
        for r in rows
    ]
    if with_last_run:
        for item, r in zip(body, rows, strict=True):
            item["last_run_status"] = r.last_run_status
            item["last_run_at"] = format_timestamp(r.last_run_at) if r.last_run_at else None
    return OrjsonResponse(body, headers=headers)


@router.post(
    "/workflows",
    status_code=status.HTTP_201_CREATED,
    response_model=WorkflowOut,
    openapi_extra=_body_doc(WorkflowCreate),
    responses={400: {"description": "Invalid graph or missing fields (invalid_graph)"}},
)
async def create_workflow(request: Request, principal: PrincipalDep, ctx: CtxDep) -> WorkflowOut:
    body = await read_json(request, MAX_WORKFLOW_BODY)
    name, graph = await _check_body(ctx, body, principal.account_id, partial=False)
    assert name is not None and graph is not None
    row = await ctx.db.write(
        lambda c: workflows.create(c, account_id=principal.account_id, name=name, graph_json=graph)
    )
    return await _out(ctx, row)


async def _out(ctx: AppContext, row: Record) -> WorkflowOut:
    """The full workflow, with what keeps it from running here now as warnings (a node
    unavailable on this server, a credential deleted since the workflow was saved)."""
    out = WorkflowOut.model_validate(row)
    problems = unavailable_nodes(row.graph_json, ctx.registry, ctx.settings)
    problems += await _credential_problems(ctx, row.graph_json, row.account_id)
    for problem in problems:
        out.warnings.append(GraphWarning(pointer=problem.pointer, message=problem.message))
    return out


async def _get_or_404(ctx: AppContext, account_id: str, workflow_id: str) -> Record:
    row = await ctx.db.read(lambda c: workflows.get(c, account_id, workflow_id))
    if row is None:
        raise NotFound("No such workflow.")
    return row


@router.get("/workflows/{workflow_id}", response_model=WorkflowOut)
async def get_workflow(workflow_id: str, principal: PrincipalDep, ctx: CtxDep) -> WorkflowOut:
    return await _out(ctx, await _get_or_404(ctx, principal.account_id, workflow_id))


@router.patch(
    "/workflows/{workflow_id}",
    response_model=WorkflowOut,
    openapi_extra=_body_doc(WorkflowUpdate),
)
async def update_workflow(
    workflow_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep
) -> WorkflowOut:
    await _get_or_404(ctx, principal.account_id, workflow_id)
    body = await read_json(request, MAX_WORKFLOW_BODY)
    name, graph = await _check_body(ctx, body, principal.account_id, partial=True)
    row = await ctx.db.write(
        lambda c: workflows.update(
            c, principal.account_id, workflow_id, name=name, graph_json=graph
        )
    )
    if row is None:
        raise NotFound("No such workflow.")
    return await _out(ctx, row)


@router.delete(
    "/workflows/{workflow_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response
)
async def delete_workflow(workflow_id: str, principal: PrincipalDep, ctx: CtxDep) -> Response:
    """Delete; its running runs are cancelled and its webhooks stop at once."""

    def delete(conn: Connection) -> list[str]:
        if not workflows.soft_delete(conn, principal.account_id, workflow_id):
            raise NotFound("No such workflow.")
        running = run_store.running_ids_of_workflow(conn, workflow_id)
        run_store.request_cancel(conn, running)
        return running

    running = await ctx.db.write(delete)
    for run_id in running:
        await ctx.dispatcher.cancel(run_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
