"""Execute a workflow, read runs, cancel a run."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Header, Query, Request, Response, status
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from nodeloom.api.body import read_json
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import link_next
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes.workflows import CursorQuery, LimitQuery
from nodeloom.api.state import AppContext
from nodeloom.db.models import utcnow
from nodeloom.engine import submit
from nodeloom.engine.submit import Accepted, RunRequest
from nodeloom.errors import Conflict, FieldError, InvalidRequest, NotFound, ServiceUnavailable
from nodeloom.schemas.common import format_timestamp
from nodeloom.schemas.runs import (
    ExecuteRequest,
    ExecuteResponse,
    RunOut,
    RunStatusName,
    RunSummary,
)
from nodeloom.store import run_views
from nodeloom.store import runs as run_store
from nodeloom.store.paging import encode_cursor

router = APIRouter(tags=["runs"])

MAX_EXECUTE_BODY = 1024 * 1024


def _ms(start: datetime | None, end: datetime | None) -> int | None:
    if start is None:
        return None
    return max(0, int(((end or utcnow()) - start).total_seconds() * 1000))


async def start_run(ctx: AppContext, request: RunRequest) -> Accepted:
    """Accept a run in one write transaction (see engine.submit), then dispatch it."""
    if not ctx.dispatcher.accepting:
        raise ServiceUnavailable(
            "The server is shutting down; retry shortly.", headers={"Retry-After": "2"}
        )
    try:
        async with ctx.admission:
            accepted = await ctx.db.run_write(
                lambda conn: submit.start_run(conn, request, ctx.graphs)
            )
    except IntegrityError:
        key = request.idempotency_key
        if key is None:
            raise
        async with ctx.db.read_core() as conn:
            earlier = await conn.run_sync(
                lambda sync: submit.earlier_answer(
                    sync, request.account_id, key, request.workflow_id
                )
            )
        if earlier is None:
            raise
        return Accepted(earlier, replayed=True)
    if not accepted.replayed:
        await ctx.dispatcher.submit(accepted.answer["run_id"], accepted.prepared)
    return accepted


def _run_location(workflow_id: str, run_id: str) -> str:
    return f"/api/v1/workflows/{quote(workflow_id, safe='')}/runs/{run_id}"


@router.post(
    "/workflows/{workflow_id}/execute",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ExecuteResponse,
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ExecuteRequest"}}
            },
        }
    },
    responses={
        402: {"description": "Insufficient credits (insufficient_credits)"},
        409: {"description": "Idempotency-Key reused for another workflow (conflict)"},
        404: {"description": "No such workflow (not_found)"},
    },
)
async def execute(
    workflow_id: str,
    request: Request,
    response: Response,
    principal: PrincipalDep,
    ctx: CtxDep,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=255, description="Repeat-safe: the same key within 24 h replays."),
    ] = None,
) -> dict[str, Any]:
    """Start a run. The body is optional: ``{"input": {...}, "cache": true}``."""
    raw = await read_json(request, MAX_EXECUTE_BODY, allow_empty=True)
    try:
        body = ExecuteRequest.model_validate(raw or {})
    except ValidationError as exc:
        errors = [
            FieldError("/" + "/".join(str(p) for p in e["loc"]), e["msg"])
            for e in exc.errors(include_url=False)
        ]
        raise InvalidRequest(
            "; ".join(f"{e.pointer}: {e.message}" for e in errors), errors=errors
        ) from exc
    accepted = await start_run(
        ctx,
        RunRequest(
            account_id=principal.account_id,
            workflow_id=workflow_id,
            run_input=body.input,
            use_cache=body.cache,
            idempotency_key=idempotency_key,
        ),
    )
    answer = accepted.answer
    if accepted.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = _run_location(workflow_id, answer["run_id"])
    return answer


def node_run_out(node: Any) -> dict[str, Any]:
    """A node run row as the API shows it (``NodeRunOut``)."""
    return {
        "node_id": node.node_id,
        "type": node.type,
        "status": node.status,
        "artifact_id": node.artifact_id,
        "credits_used": node.credits_used,
        "cached": node.cached,
        "started_at": _ts(node.started_at),
        "finished_at": _ts(node.finished_at),
        "duration_ms": _ms(node.started_at, node.finished_at) if node.started_at else None,
        "error": node.error,
    }


def run_summary(run: Any, credits_so_far: int | None = None) -> dict[str, Any]:
    """A run row as the API shows it (``RunSummary``): running runs show what their
    completed nodes were charged so far."""
    used = run.credits_used if run.status != "running" else (credits_so_far or 0)
    return {
        "id": run.id,
        "workflow_id": run.workflow_id,
        "status": run.status,
        "credits_used": used,
        "estimated_credits": run.estimated_credits,
        "duration_ms": _ms(run.created_at, run.finished_at) or 0,
        "created_at": _ts(run.created_at),
        "finished_at": _ts(run.finished_at),
        "error": _error(run.error),
    }


def _ts(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def _error(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if not value:
        return None
    return {
        "code": value.get("code", "error"),
        "message": value.get("message", ""),
        "node_id": value.get("node_id"),
    }


@router.get("/workflows/{workflow_id}/runs/{run_id}", response_model=RunOut)
async def get_run(
    workflow_id: str, run_id: str, principal: PrincipalDep, ctx: CtxDep
) -> OrjsonResponse:
    """The run with every node. Built straight from two indexed reads (this endpoint is
    polled), so the body is encoded once, without a validation pass."""
    async with ctx.db.read_core() as conn:
        run = await run_views.run(conn, principal.account_id, workflow_id, run_id)
        if run is None:
            raise NotFound("No such run of this workflow.")
        nodes = [node_run_out(n) for n in await run_views.node_runs(conn, run_id)]
    body = run_summary(run, sum(n["credits_used"] for n in nodes))
    body["input"] = run.input
    body["node_runs"] = nodes
    return OrjsonResponse(body)


@router.get("/workflows/{workflow_id}/runs", response_model=list[RunSummary])
async def list_runs(
    workflow_id: str,
    request: Request,
    principal: PrincipalDep,
    ctx: CtxDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
    status_filter: Annotated[RunStatusName | None, Query(alias="status")] = None,
) -> OrjsonResponse:
    """Newest first, paged; ``?status=running|completed|failed`` filters."""
    headers: dict[str, str] = {}
    async with ctx.db.read_core() as conn:
        if not await run_views.workflow_exists(conn, principal.account_id, workflow_id):
            raise NotFound("No such workflow.")
        rows = await run_views.page(
            conn, principal.account_id, workflow_id, status_filter, limit, cursor
        )
        if len(rows) > limit:
            rows = rows[:limit]
            headers["Link"] = link_next(request, encode_cursor(rows[-1].created_at, rows[-1].id))
        running = [r.id for r in rows if r.status == "running"]
        so_far = await run_views.credits_so_far(conn, running)
    return OrjsonResponse([run_summary(r, so_far.get(r.id)) for r in rows], headers=headers)


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
    async with ctx.db.write() as session:
        run = await run_store.get(session, principal.account_id, run_id, workflow_id)
        if run is None:
            raise NotFound("No such run of this workflow.")
        if run.status != "running":
            raise Conflict(f"The run has already finished ({run.status}).")
        await run_store.request_cancel(session, [run_id])
        summary = run_summary(run)
    await ctx.dispatcher.cancel(run_id)
    return summary
