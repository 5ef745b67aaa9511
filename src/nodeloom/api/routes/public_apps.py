"""What a visitor does with a published app, without an account: read its form, start a
run (JSON, or multipart with files), read that run with its visitor token and follow it as
Server-Sent Events. Every answer is trimmed to what a visitor may see (engine/apps.py): no
graph, no credentials, no other visitor's runs. A private app needs its owner's credential;
an app with a password needs it on every run (``X-App-Password``). An unpublished or deleted
app answers 404 at once, and its open streams end."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request, Response, status
from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.engine import Connection

from nodeloom.api.body import read_json
from nodeloom.api.deps import CtxDep, bearer, get_principal
from nodeloom.api.routes.apps import APP_CLOSED
from nodeloom.api.routes.assets import form_with_files
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.api.uploads import is_multipart
from nodeloom.api.webapp import NO_CACHE, app_page, embeddable_headers
from nodeloom.auth.passwords import verify_password
from nodeloom.auth.tokens import sign_url
from nodeloom.db.models import utcnow
from nodeloom.engine import app_challenge, apps
from nodeloom.engine.run_request import RunRequest
from nodeloom.errors import (
    FieldError,
    InvalidCredentials,
    InvalidRequest,
    NotFound,
    ProblemError,
    RateLimited,
)
from nodeloom.ratelimit import Reservation
from nodeloom.schemas.apps import PublicApp, VisitorRun, VisitorRunAccepted
from nodeloom.states import RunStatus
from nodeloom.store import Record
from nodeloom.store import accounts as account_store
from nodeloom.store import apps as app_store
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import runs as run_store

router = APIRouter(route_class=GuardedRoute, tags=["apps"])
page_router = APIRouter(route_class=GuardedRoute)

MAX_RUN_BODY = 1024 * 1024
RATE_WINDOW = 3600
KEEPALIVE_SECONDS = 10.0  # also how often an open stream checks its app is still there
COVER_URL_SECONDS = 24 * 3600
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such app, or not published (not_found)"}
}
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
TokenHeader = Annotated[
    str | None, Header(alias="X-Visitor-Token", max_length=200, description="The run's token.")
]
ChallengeHeader = Annotated[
    str | None,
    Header(alias="X-App-Challenge", max_length=300, description="The form's challenge token."),
]
SolutionHeader = Annotated[
    str | None,
    Header(alias="X-App-Solution", max_length=64, description="The challenge's solution."),
]
TokenQuery = Annotated[
    str | None,
    Query(max_length=200, description="The run's token, for clients that cannot set headers."),
]


async def _app(request: Request, ctx: AppContext, slug: str, credentials: Any) -> Record:
    """The published app ``slug`` as this visitor may see it: 404 when there is none, and for
    a private app unless the request carries its owner's credential."""
    row = await ctx.db.read(lambda c: app_store.published(c, slug)) if len(slug) <= 64 else None
    if row is None:
        raise NotFound("No such app.")
    if row.access == "private":
        try:
            principal = await get_principal(request, ctx, credentials) if credentials else None
        except ProblemError:
            principal = None
        if principal is None or principal.account_id != row.account_id:
            raise NotFound("No such app.")
    return row


def cover_url(ctx: AppContext, row: Record) -> str | None:
    """The app's cover image as a signed, expiring address (the visitor has no credential)."""
    if not row.cover_asset_id:
        return None
    path = f"/api/v1/assets/{row.cover_asset_id}/content"
    return f"{path}?{sign_url(ctx.settings.secret, path, COVER_URL_SECONDS)}"


@router.get("/public/apps/{slug}", response_model=PublicApp, responses=_NOT_FOUND)
async def public_app(
    slug: str, request: Request, ctx: CtxDep, credentials: Credentials
) -> dict[str, Any]:
    """The app's form: title, description, fields and outputs. Never the graph."""
    row = await _app(request, ctx, slug, credentials)
    return {
        "slug": row.slug,
        "title": row.title,
        "description": row.description,
        "cover_url": cover_url(ctx, row),
        "inputs": row.inputs,
        "outputs": row.outputs,
        "password_required": row.password_hash is not None,
        "challenge": (
            app_challenge.issue(ctx.settings.secret, row.id, row.challenge_bits, utcnow())
            if row.challenge_bits
            else None
        ),
    }


def _limited(what: str, reservation: Reservation) -> RateLimited:
    decision = reservation.decision
    return RateLimited(
        f"Too many runs of this app {what} in the last hour; retry in {decision.reset_seconds} s.",
        headers=decision.headers(),
    )


async def _visitor_body(
    request: Request, ctx: AppContext, owner: Record
) -> tuple[dict[str, Any], dict[str, str]]:
    """The text values and the uploaded files (key -> asset of the owner) of a run body."""
    if is_multipart(request):
        fields, files = await form_with_files(request, ctx, owner.id, owner.plan)
        values: dict[str, Any] = {}
        raw = fields.pop("input", None)
        if raw:
            try:
                parsed = orjson.loads(raw)
            except orjson.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                raise InvalidRequest(
                    "The input part is a JSON object.",
                    errors=[FieldError("form:input", "not a JSON object")],
                )
            values.update(parsed)
        values.update({k: v for k, v in fields.items() if k not in values})
        return values, files
    body = await read_json(request, MAX_RUN_BODY, allow_empty=True)
    if body is not None and not isinstance(body, dict):
        raise InvalidRequest("The body is a JSON object.", errors=[FieldError("", "not an object")])
    value = (body or {}).get("input") or {}
    if not isinstance(value, dict):
        raise InvalidRequest(
            "input is a JSON object.", errors=[FieldError("/input", "not an object")]
        )
    return value, {}


@router.post(
    "/public/apps/{slug}/runs",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=VisitorRunAccepted,
    responses={
        **_NOT_FOUND,
        400: {"description": "The form is not filled in as the app asks (invalid_request)"},
        401: {"description": "Missing or wrong app password (invalid_credentials)"},
        402: {"description": "The app's budget is spent (app_budget_exhausted)"},
        403: {"description": "No valid proof of work, when the app asks one (challenge_failed)"},
        429: {"description": "Too many runs from this visitor or address (rate_limited)"},
    },
)
async def start_run(
    slug: str,
    request: Request,
    response: Response,
    ctx: CtxDep,
    credentials: Credentials,
    password: Annotated[str | None, Header(alias="X-App-Password", max_length=128)] = None,
    session: Annotated[
        str | None,
        Header(alias="X-Visitor-Session", max_length=100, description="The visitor's session."),
    ] = None,
    challenge: ChallengeHeader = None,
    solution: SolutionHeader = None,
) -> dict[str, Any]:
    """Start a run of the app: ``{"input": {"<key>": "text"}}``, or multipart/form-data with
    an ``input`` JSON part (or one text part per field) and one file part per media field.
    Charged to the app's owner. The answer's ``visitor_token`` reads the run. An app that
    asks for a proof of work needs the form's challenge and its solution, once each."""
    app = await _app(request, ctx, slug, credentials)
    if app.challenge_bits:
        await _proof(ctx, app, challenge, solution)
    address = request.client.host if request.client else "unknown"
    async with ctx.limiter.reserve(
        f"app:{app.id}:ip:{address}", app.rate_per_ip, RATE_WINDOW
    ) as by_ip:
        if not by_ip.decision.allowed:
            raise _limited("from this address", by_ip)
        async with ctx.limiter.reserve(
            f"app:{app.id}:visitor:{session or address}", app.rate_per_visitor, RATE_WINDOW
        ) as by_visitor:
            if not by_visitor.decision.allowed:
                raise _limited("from this visitor", by_visitor)
            if app.password_hash is not None and not await asyncio.to_thread(
                verify_password, app.password_hash, password or ""
            ):
                raise InvalidCredentials("This app needs its password (X-App-Password).")
            answer = await _start(request, ctx, app)
    response.headers["Location"] = f"/api/v1/public/apps/{slug}/runs/{answer['run_id']}"
    return answer


async def _proof(ctx: AppContext, app: Record, challenge: str | None, solution: str | None) -> None:
    """Check the run's proof of work and mark its challenge used, before anything costly
    (the password's hash, the upload, the run): a refused proof costs the server one hash."""
    now = utcnow()
    solved = app_challenge.check(
        ctx.settings.secret, app.id, app.challenge_bits, challenge, solution, now
    )
    if not await ctx.db.write(
        lambda c: app_store.use_challenge(c, solved.nonce, solved.expires_at, now)
    ):
        raise app_challenge.used()


async def _start(request: Request, ctx: AppContext, app: Record) -> dict[str, Any]:
    owner = await ctx.db.read(lambda c: account_store.by_id(c, app.account_id))
    if owner is None:
        raise NotFound("No such app.")
    values, files = await _visitor_body(request, ctx, owner)
    run_input = apps.run_input(app.inputs, values, files)
    token = apps.new_token()
    accepted = await ctx.acceptor.accept(
        RunRequest(
            account_id=app.account_id,
            workflow_id=app.workflow_id,
            run_input=run_input or None,
            use_cache=True,
            plan=str(owner.plan),
            trigger="app",
            pinned_version=app.workflow_version,
            on_accept=apps.admission(app, apps.token_hash(ctx.settings.secret, token), utcnow()),
        )
    )
    answer = accepted.answer
    return {
        "run_id": answer["run_id"],
        "status": answer["status"],
        "visitor_token": token,
        "estimated_credits": answer["estimated_credits"],
    }


def _read_run(
    ctx: AppContext, app_id: str, run_id: str, token: str | None, conn: Connection
) -> dict[str, Any] | None:
    """The visitor's record of ``run_id``, or None when the app is gone or the token is not
    the run's (which reads exactly like an unknown run)."""
    app = app_store.by_id_published(conn, app_id)
    if app is None or not token:
        return None
    run = app_store.visitor_run(conn, app_id, run_id)
    if run is None or not hmac.compare_digest(
        run.token_hash, apps.token_hash(ctx.settings.secret, token)
    ):
        return None
    nodes = run_store.node_runs(conn, run_id)
    shown = {o["node_id"] for o in app.outputs}
    ids = [n.artifact_id for n in nodes if n.node_id in shown and n.artifact_id]
    artifacts = artifact_store.by_ids(conn, ids)
    return apps.visitor_record(ctx.settings.secret, app, run, nodes, artifacts, utcnow())


@dataclass(frozen=True)
class _Visit:
    """A visitor's run as its token reads it: the app, the visitor's record of the run and
    the token (from ``X-Visitor-Token``, else ``?token=``)."""

    app: Record
    run_id: str
    record: dict[str, Any]
    token: str | None


async def _visit(
    slug: str,
    run_id: str,
    request: Request,
    ctx: CtxDep,
    credentials: Credentials,
    header_token: TokenHeader = None,
    token: TokenQuery = None,
) -> _Visit:
    """The app and the visitor's record of its run ``run_id`` (404 for a wrong token)."""
    credential = header_token or token
    app = await _app(request, ctx, slug, credentials)
    found = await ctx.db.read(lambda c: _read_run(ctx, app.id, run_id, credential, c))
    if found is None:
        raise NotFound("No such run of this app.")
    return _Visit(app, run_id, found, credential)


VisitDep = Annotated[_Visit, Depends(_visit)]


@router.get("/public/apps/{slug}/runs/{run_id}", response_model=VisitorRun, responses=_NOT_FOUND)
async def visitor_run(visit: VisitDep) -> dict[str, Any]:
    """The visitor's run: status, progress and the shown outputs with signed download
    addresses. Needs the run's ``visitor_token`` (header, or ``?token=``)."""
    return visit.record


@router.get(
    "/public/apps/{slug}/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-Sent Events: ``run`` with the visitor's record of the run "
            "each time it changes, ending when the run ends; ``closed`` when the app is "
            "unpublished or deleted meanwhile.",
            "content": {"text/event-stream": {}},
        },
        **_NOT_FOUND,
    },
)
async def visitor_events(visit: VisitDep, ctx: CtxDep) -> StreamingResponse:
    """The visitor's run as it changes (Server-Sent Events; ``?token=`` for EventSource)."""
    return StreamingResponse(
        _frames(ctx, visit.app, visit.run_id, visit.token, visit.record),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


async def _frames(
    ctx: AppContext, app: Record, run_id: str, token: str | None, first: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The record now, then again after each event of the run (several at once coalesce),
    until the run ends; ``closed`` as soon as the app is unpublished or deleted (a signal on
    the bus, and a look every ``KEEPALIVE_SECONDS`` in case a signal was lost)."""
    with ctx.bus.subscribe(app.account_id) as sub:
        sub.watch_run(run_id)  # bus first, then the database: nothing between is lost
        record: dict[str, Any] | None = first
        if first["status"] == RunStatus.RUNNING:
            record = await ctx.db.read(lambda c: _read_run(ctx, app.id, run_id, token, c))
        last: dict[str, Any] | None = None
        while True:
            if record is None:
                yield _frame("closed", {"detail": "The app is no longer published."})
                return
            if record != last:
                yield _frame("run", record)
                last = record
            if record["status"] != RunStatus.RUNNING:
                return
            try:
                event = await asyncio.wait_for(sub.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield b": keep-alive\n\n"
                event = None
            closed = event is not None and event.type == APP_CLOSED
            while not sub.queue.empty():
                closed |= sub.queue.get_nowait().type == APP_CLOSED
            sub.overflowed = False
            if closed:
                record = None
                continue
            record = await ctx.db.read(lambda c: _read_run(ctx, app.id, run_id, token, c))


@page_router.api_route("/apps/{slug}", methods=["GET", "HEAD"], include_in_schema=False)
async def page(slug: str, ctx: CtxDep) -> Response:
    """The app's page (the web app's ``app.html``). Embeddable only by the app's allowlist
    (CSP ``frame-ancestors``). An unknown, unpublished or private app gets the same page
    with status 404 (the page itself says the app is not available)."""
    row = await ctx.db.read(lambda c: app_store.published(c, slug)) if len(slug) <= 64 else None
    shown = row is not None and row.access != "private"
    headers = embeddable_headers(list(row.frame_ancestors) if shown and row else [])
    headers["Cache-Control"] = NO_CACHE
    code = status.HTTP_200_OK if shown else status.HTTP_404_NOT_FOUND
    built = app_page(ctx.settings.web_dist_dir)
    if built is None:
        return HTMLResponse("<!doctype html><title>App</title>", status_code=code, headers=headers)
    return FileResponse(built, status_code=code, headers=headers)
