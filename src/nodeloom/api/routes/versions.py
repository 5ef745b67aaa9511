"""A workflow's versions: list, read one, restore one (docs/versions.md).

Every save of a workflow (create, update, restore) is kept as an immutable version; these
routes read them and save an old one again as the newest.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from sqlalchemy.engine import Connection

from nodeloom.api.body import body_doc, read_json, validated
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import PageDep
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes.workflows import (
    ETAG_HEADER,
    SAVE_RESPONSES,
    IfMatchHeader,
    check_body,
    expected_version,
    get_or_404,
    save_version,
    saved_by,
)
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.errors import NotFound
from nodeloom.schemas.workflows import (
    RestoreRequest,
    WorkflowOut,
    WorkflowVersionOut,
    WorkflowVersionSummary,
)
from nodeloom.store import Record, workflows
from nodeloom.store.paging import number_cursor
from nodeloom.timestamps import format_timestamp

router = APIRouter(route_class=GuardedRoute, tags=["workflows"])

VersionPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="A version number (1, 2, ...)")]
MAX_RESTORE_BODY = 64 * 1024


def version_summary(row: Record) -> dict[str, Any]:
    return {
        "workflow_id": row.workflow_id,
        "version": row.number,
        "name": row.name,
        "node_count": row.node_count,
        "created_at": format_timestamp(row.created_at),
        "created_by": {
            "account_id": row.author_account_id,
            "email": row.author_email,
            "via": row.author_via,
            "api_key_id": row.author_api_key_id,
            "api_key_name": row.author_api_key_name,
        },
        "message": row.message,
        "restored_from": row.restored_from,
    }


@router.get("/workflows/{workflow_id}/versions", response_model=list[WorkflowVersionSummary])
async def list_versions(
    workflow_id: str, principal: PrincipalDep, ctx: CtxDep, page: PageDep
) -> OrjsonResponse:
    """Every saved version, newest first, without their graphs (read one for that); the next
    page is in the ``Link: <...>; rel="next"`` header."""
    before = number_cursor(page.cursor)  # the number of the last version of the page before

    def read(conn: Connection) -> list[Record]:
        if workflows.current_version(conn, principal.account_id, workflow_id) is None:
            raise NotFound("No such workflow.")
        return workflows.versions_page(conn, principal.account_id, workflow_id, page.limit, before)

    rows, headers = page.rows_and_headers(await ctx.db.read(read), lambda r: str(r.number))
    return OrjsonResponse([version_summary(r) for r in rows], headers=headers)


async def _version_or_404(
    ctx: AppContext, account_id: str, workflow_id: str, number: int
) -> Record:
    row = await ctx.db.read(lambda c: workflows.version(c, account_id, workflow_id, number))
    if row is None:
        raise NotFound(f"This workflow has no version {number}.")
    return row


@router.get("/workflows/{workflow_id}/versions/{version}", response_model=WorkflowVersionOut)
async def get_version(
    workflow_id: str, version: VersionPath, principal: PrincipalDep, ctx: CtxDep
) -> OrjsonResponse:
    """One version as it was saved, with its graph."""
    row = await _version_or_404(ctx, principal.account_id, workflow_id, version)
    body = version_summary(row)
    body["graph_json"] = row.graph_json
    return OrjsonResponse(body)


@router.post(
    "/workflows/{workflow_id}/versions/{version}/restore",
    response_model=WorkflowOut,
    openapi_extra=body_doc(RestoreRequest, required=False),
    responses={
        200: {"headers": ETAG_HEADER},
        **SAVE_RESPONSES,
        404: {"description": "No such workflow or version (not_found)"},
    },
)
async def restore_version(
    workflow_id: str,
    version: VersionPath,
    request: Request,
    response: Response,
    principal: PrincipalDep,
    ctx: CtxDep,
    if_match: IfMatchHeader = None,
) -> WorkflowOut:
    """Save version N's name and graph again, as a new version (history is never
    rewritten). The saved graph is checked as any save is: a version that no longer
    validates here (a credential deleted since) is refused with 400, nothing saved.
    ``If-Match`` as on an update. Body optional: ``{"message": "..."}``."""
    current = await get_or_404(ctx, principal.account_id, workflow_id)
    expected = expected_version(if_match, current)
    raw = await read_json(request, MAX_RESTORE_BODY, allow_empty=True)
    body = validated(RestoreRequest, raw)
    old = await _version_or_404(ctx, principal.account_id, workflow_id, version)
    content = {"name": old.name, "graph_json": old.graph_json}
    name, graph, _ = await check_body(
        ctx, content, principal.account_id, partial=False, workflow_id=workflow_id
    )
    message = (body.message or "").strip() or f"Restored version {version}"
    save = saved_by(principal, message, restored_from=version)
    return await save_version(
        ctx, principal.account_id, workflow_id, name, graph, save, expected, response
    )
