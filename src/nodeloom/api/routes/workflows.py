"""Workflows: list, create, get, update, delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status

from nodeloom.api.body import read_json
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import link_next
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.state import AppContext
from nodeloom.db.models import Workflow
from nodeloom.engine.graph import validate_graph
from nodeloom.errors import FieldError, InvalidGraph, NotFound
from nodeloom.schemas.common import format_timestamp
from nodeloom.schemas.workflows import WorkflowCreate, WorkflowOut, WorkflowSummary, WorkflowUpdate
from nodeloom.store import runs as run_store
from nodeloom.store import workflows
from nodeloom.store.paging import encode_cursor

router = APIRouter(tags=["workflows"])

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


def _check_body(
    ctx: AppContext, body: Any, *, partial: bool
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
            problems.extend(checked)
    if problems:
        raise InvalidGraph(
            f"The workflow is invalid: {len(problems)} problem(s). "
            + "; ".join(f"{p.pointer}: {p.message}" for p in problems[:5]),
            errors=problems,
        )
    return name, graph


@router.get("/workflows", response_model=list[WorkflowSummary])
async def list_workflows(
    request: Request,
    principal: PrincipalDep,
    ctx: CtxDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> OrjsonResponse:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header."""
    async with ctx.db.read_core() as conn:
        rows = await workflows.page(conn, principal.account_id, limit, cursor)
    headers: dict[str, str] = {}
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        headers["Link"] = link_next(request, encode_cursor(last.created_at, last.id))
    body = [
        {
            "id": r.id,
            "name": r.name,
            "created_at": format_timestamp(r.created_at),
            "node_count": r.node_count,
        }
        for r in rows
    ]
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
    name, graph = _check_body(ctx, body, partial=False)
    assert name is not None and graph is not None
    async with ctx.db.write() as session:
        row = await workflows.create(
            session, account_id=principal.account_id, name=name, graph_json=graph
        )
        return WorkflowOut.model_validate(row)


async def _get_or_404(ctx: AppContext, account_id: str, workflow_id: str) -> Workflow:
    async with ctx.db.read() as session:
        row = await workflows.get(session, account_id, workflow_id)
    if row is None:
        raise NotFound("No such workflow.")
    return row


@router.get("/workflows/{workflow_id}", response_model=WorkflowOut)
async def get_workflow(workflow_id: str, principal: PrincipalDep, ctx: CtxDep) -> WorkflowOut:
    return WorkflowOut.model_validate(await _get_or_404(ctx, principal.account_id, workflow_id))


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
    name, graph = _check_body(ctx, body, partial=True)
    async with ctx.db.write() as session:
        row = await workflows.get(session, principal.account_id, workflow_id)
        if row is None:
            raise NotFound("No such workflow.")
        row = await workflows.update(session, row, name=name, graph_json=graph)
        return WorkflowOut.model_validate(row)


@router.delete(
    "/workflows/{workflow_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response
)
async def delete_workflow(workflow_id: str, principal: PrincipalDep, ctx: CtxDep) -> Response:
    """Delete; its running runs are cancelled and its webhooks stop at once."""
    async with ctx.db.write() as session:
        row = await workflows.get(session, principal.account_id, workflow_id)
        if row is None:
            raise NotFound("No such workflow.")
        await workflows.soft_delete(session, row)
        running = await run_store.running_ids_of_workflow(session, row.id)
        await run_store.request_cancel(session, running)
    for run_id in running:
        await ctx.dispatcher.cancel(run_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
