"""Approvals: the account's inbox of Approval nodes waiting for a person, and their
decisions — through the API (the caller's credentials) or a one-click signed link.

A signed link (``?exp=&sig=``, signed as artifact URLs are, valid until the approval
expires) is its own authorisation, so it must never decide on a GET: mail scanners and link
previews fetch links. A GET shows a small page with the prompt and one button; the button
POSTs the same URL, which decides. How the node waits and wakes is engine/approvals.py.
"""

from __future__ import annotations

import html
from typing import Annotated, Any
from urllib.parse import parse_qs

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.engine import Connection

from nodeloom.api.body import body_doc, read_json, read_limited, validated
from nodeloom.api.deps import CtxDep, PrincipalDep, bearer, get_principal
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.api.urls import public_base
from nodeloom.api.webapp import CSP
from nodeloom.auth.tokens import sign_url
from nodeloom.db.models import utcnow
from nodeloom.engine import approvals
from nodeloom.errors import Conflict, FieldError, InvalidRequest, NotFound, Unauthorized
from nodeloom.schemas.approvals import (
    MAX_COMMENT,
    ApprovalDecision,
    ApprovalInput,
    ApprovalList,
    ApprovalOut,
)
from nodeloom.states import RunStatus
from nodeloom.store import Record
from nodeloom.store import approvals as approval_store
from nodeloom.store import artifacts as artifact_store
from nodeloom.timestamps import format_timestamp

router = APIRouter(route_class=GuardedRoute, tags=["approvals"])

MAX_LISTED = 200
MAX_BODY = 128 * 1024
INLINE_PREVIEW = 64 * 1024
ExpQuery = Annotated[str | None, Query(max_length=20, description="Signed link expiry")]
SigQuery = Annotated[str | None, Query(max_length=128, description="Signed link signature")]
CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

_DECIDE_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A malformed body, or text the node does not allow (invalid_request)"},
    401: {"description": "No credential, or a bad or expired signature"},
    404: {"description": "No such approval in this account (not_found)"},
    409: {"description": "Decided already, or its run no longer runs (conflict)"},
}


def _input_of(ctx: AppContext, conn: Connection, row: Record, base: str) -> ApprovalInput | None:
    if row.input_artifact_id is None:
        return None
    artifact = artifact_store.any_account(conn, row.input_artifact_id)
    if artifact is None:
        return None
    settings = ctx.settings
    path = f"/api/v1/artifacts/{artifact.id}"
    text = None
    if artifact.content_type == "text/plain" and artifact.size_bytes <= INLINE_PREVIEW:
        if artifact.data is not None:
            text = bytes(artifact.data).decode("utf-8", "replace")
    return ApprovalInput(
        artifact_id=artifact.id,
        content_type=artifact.content_type,
        url=f"{base}{path}?{sign_url(settings.secret, path, settings.signed_url_ttl_seconds)}",
        text=text,
    )


def _out(ctx: AppContext, conn: Connection, row: Record, base: str) -> ApprovalOut:
    links: dict[str, str | None] = {"approve_url": None, "reject_url": None}
    if row.status == approval_store.PENDING and row.expires_at > utcnow():
        links.update(approvals.signed_links(ctx.settings, row, base))
    node_id = row.node_id
    if row.item_index is not None:
        node_id = node_id.rpartition("#")[0]  # an instance id: shown as its drawn node
    return ApprovalOut(
        id=row.id,
        run_id=row.run_id,
        node_id=node_id,
        item_index=row.item_index,
        workflow_id=row.workflow_id,
        workflow_name=row.workflow_name,
        status=row.status,
        kind=row.kind,
        prompt=row.prompt,
        allow_edit=row.allow_edit,
        timeout_outcome=row.timeout_outcome,
        created_at=row.created_at,
        expires_at=row.expires_at,
        decided_at=row.decided_at,
        decided_by=row.decided_by,
        comment=row.comment,
        text=row.text,
        input=_input_of(ctx, conn, row, base),
        **links,
    )


@router.get("/approvals", response_model=ApprovalList)
async def list_approvals(principal: PrincipalDep, ctx: CtxDep, request: Request) -> ApprovalList:
    """The account's approvals waiting for a person, oldest first, each with what it asks
    about (a signed URL of the upstream artifact; the text itself when small)."""
    base = public_base(ctx.settings.base_url, request.scope)
    account_id = principal.account_id

    def read(conn: Connection) -> ApprovalList:
        rows = approval_store.pending(conn, account_id, MAX_LISTED)
        count = (
            len(rows) if len(rows) < MAX_LISTED else approval_store.count_pending(conn, account_id)
        )
        return ApprovalList(data=[_out(ctx, conn, r, base) for r in rows], count=count)

    return await ctx.db.read(read)


@router.get(
    "/approvals/{approval_id}", response_model=ApprovalOut, responses={404: {"description": "-"}}
)
async def get_approval(
    approval_id: str, principal: PrincipalDep, ctx: CtxDep, request: Request
) -> ApprovalOut:
    """One approval, pending or decided (with its decision, comment and edited text)."""
    base = public_base(ctx.settings.base_url, request.scope)
    account_id = principal.account_id

    def read(conn: Connection) -> ApprovalOut | None:
        row = approval_store.get(conn, account_id, approval_id)
        return _out(ctx, conn, row, base) if row is not None else None

    found = await ctx.db.read(read)
    if found is None:
        raise NotFound("No such approval.")
    return found


async def _decide(
    ctx: AppContext,
    account_id: str | None,
    approval_id: str,
    action: str,
    decision: ApprovalDecision,
    by: str,
) -> Record:
    """Decide, committed, then wake the node: the approval as decided. ``account_id`` None:
    a signed link's decision."""
    status = approvals.ACTIONS[action]

    def write(conn: Connection) -> Record:
        row = approval_store.get(conn, account_id, approval_id)
        if row is None:
            raise NotFound("No such approval.")
        if row.status != approval_store.PENDING:
            raise Conflict(
                f"This approval was {row.status} already.", extra={"decision": row.status}
            )
        if row.run_status != RunStatus.RUNNING:
            raise Conflict(f"Its run is {row.run_status}: nothing waits for this approval.")
        text = decision.text
        if text is not None:
            _check_text(row, action, text)
        if not approval_store.decide(
            conn, approval_id, status, by=by, now=utcnow(), comment=decision.comment, text=text
        ):
            raise Conflict("This approval was decided already.")
        return row

    row = await ctx.db.write(write)
    await approvals.decided(ctx.bus, row)
    return row


def _check_text(row: Record, action: str, text: str) -> None:
    problem = None
    if not row.allow_edit:
        problem = "this Approval node does not allow editing the text"
    elif action != "approve":
        problem = "edited text is only taken with an approval"
    elif row.kind == "json":
        # A json node's output must stay JSON (the json kind is carried as text).
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError:
            problem = "the node's output is JSON: the edited text must be JSON"
    if problem is not None:
        raise InvalidRequest(problem, errors=[FieldError("/text", problem)])


async def _decision_of(request: Request) -> ApprovalDecision:
    raw = await read_json(request, MAX_BODY, allow_empty=True)
    return validated(ApprovalDecision, raw)


def _check_link(
    ctx: AppContext, approval_id: str, action: str, exp: str | None, sig: str | None
) -> None:
    if not approvals.link_valid(ctx.settings, approval_id, action, exp or "", sig or ""):
        raise Unauthorized("The signature is invalid or has expired.")


async def _form_decision(request: Request) -> ApprovalDecision:
    """The confirmation page's form (``comment``), or a JSON body."""
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        return await _decision_of(request)
    raw = await read_limited(request, MAX_BODY)
    fields = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=False)
    comment = fields.get("comment", [""])[0][:MAX_COMMENT]
    return validated(ApprovalDecision, {"comment": comment or None})


def _page(title: str, body: str, status_code: int = 200) -> Response:
    document = (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        "<body style='font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto;"
        f"padding:0 1rem'><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    headers = {"Content-Security-Policy": CSP, "Cache-Control": "no-store"}
    return Response(document, status_code, headers=headers, media_type="text/html")


def _route(action: str) -> None:
    verb = "Approve" if action == "approve" else "Reject"

    @router.post(
        f"/approvals/{{approval_id}}/{action}",
        response_model=ApprovalOut,
        responses=_DECIDE_ERRORS,
        openapi_extra=body_doc(ApprovalDecision, required=False),
        name=f"{action}_approval",
        summary=f"{verb} an approval",
    )
    async def decide(
        approval_id: str,
        request: Request,
        ctx: CtxDep,
        credentials: CredentialsDep,
        exp: ExpQuery = None,
        sig: SigQuery = None,
    ) -> Any:
        """Decide with the caller's credentials (JSON body ``{comment, text}``, both
        optional), or through the signed link (``?exp=&sig=``: the confirmation page's
        form, answered with a page)."""
        base = public_base(ctx.settings.base_url, request.scope)
        if exp is not None or sig is not None:
            _check_link(ctx, approval_id, action, exp, sig)
            decision = await _form_decision(request)
            try:
                await _decide(ctx, None, approval_id, action, decision, by="link")
            except Conflict as exc:
                return _page("Nothing to decide", f"<p>{html.escape(exc.detail)}</p>", 409)
            done = "Approved" if action == "approve" else "Rejected"
            return _page(done, "<p>Thank you: the run goes on.</p>")
        principal = await get_principal(request, ctx, credentials)
        decision = await _decision_of(request)
        await _decide(ctx, principal.account_id, approval_id, action, decision, by="api")
        return await ctx.db.read(
            lambda c: _out(ctx, c, approval_store.get(c, principal.account_id, approval_id), base)
        )

    @router.get(
        f"/approvals/{{approval_id}}/{action}",
        response_class=Response,
        responses={200: {"content": {"text/html": {}}}, 401: {"description": "Bad signature"}},
        name=f"{action}_approval_page",
        summary=f"{verb} through a signed link: a confirmation page",
    )
    async def page(
        approval_id: str, ctx: CtxDep, exp: ExpQuery = None, sig: SigQuery = None
    ) -> Response:
        """The page a signed link opens: the prompt and one button that POSTs the same
        URL. A GET never decides (link previews and mail scanners fetch links)."""
        _check_link(ctx, approval_id, action, exp, sig)
        row = await ctx.db.read(lambda c: approval_store.get(c, None, approval_id))
        if row is None:
            raise NotFound("No such approval.")
        if row.status != approval_store.PENDING or row.run_status != RunStatus.RUNNING:
            return _page("Nothing to decide", f"<p>This approval is {row.status}.</p>", 409)
        target = html.escape(f"{approvals.action_path(approval_id, action)}?exp={exp}&sig={sig}")
        body = (
            f"<p>{html.escape(row.workflow_name)}: {html.escape(row.prompt)}</p>"
            f"<p>Expires {html.escape(format_timestamp(row.expires_at))}.</p>"
            f'<form method=post action="{target}">'
            "<p><label>Comment (optional)<br>"
            f"<textarea name=comment maxlength={MAX_COMMENT} rows=3 cols=40></textarea>"
            f"</label></p><button type=submit>{verb}</button></form>"
        )
        return _page(f"{verb}?", body)


for _action in approvals.ACTIONS:
    _route(_action)
