"""Apps of the account: publish a workflow version as a page, list, read, change, unpublish
and delete. What a visitor does with a published app is api/routes/public_apps.py; the rules
are engine/apps.py and docs/apps.md."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from sqlalchemy.engine import Connection

from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import PageDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.api.urls import public_base
from nodeloom.auth.passwords import hash_password
from nodeloom.db.models import utcnow
from nodeloom.engine import apps
from nodeloom.errors import FieldError, InvalidRequest, NotFound
from nodeloom.events.model import Event
from nodeloom.schemas.apps import AppCreate, AppInput, AppOut, AppOutput, AppUpdate
from nodeloom.store import Record
from nodeloom.store import apps as app_store
from nodeloom.store import assets as asset_store

router = APIRouter(route_class=GuardedRoute, tags=["apps"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "The form does not match the workflow version (invalid_request)"},
    404: {"description": "No such app, workflow, version or cover asset (not_found)"},
    413: {"description": "The body is larger than allowed (payload_too_large)"},
}
WorkflowFilter = Annotated[
    str | None, Query(max_length=36, description="Only the apps of this workflow.")
]
APP_CLOSED = "app.closed"  # the bus signal that ends a visitor's event stream (seq 0)


def _out(request: Request, ctx: AppContext, row: Record, spent: tuple[int, int]) -> AppOut:
    base = public_base(ctx.settings.base_url, request.scope)
    return AppOut.model_validate(
        {
            **row._asdict(),
            "url": f"{base}/apps/{row.slug}",
            "has_password": row.password_hash is not None,
            "spent_today": spent[0],
            "spent_total": spent[1],
        }
    )


def _spent(conn: Connection, app_id: str) -> tuple[int, int]:
    today = apps.day_start(utcnow())
    return app_store.spent(conn, app_id, today), app_store.spent(conn, app_id, None)


def _origins(values: list[str] | None) -> None:
    """Each embedding origin is ``scheme://host[:port]``: it goes into a CSP header as is."""
    for i, origin in enumerate(values or []):
        scheme, sep, rest = origin.partition("://")
        bad = (
            scheme not in ("http", "https")
            or not sep
            or not rest
            or any(c in rest for c in "/?#; ,'\"\\*")
        )
        if bad or len(origin) > 300:
            raise InvalidRequest(
                "An embedding origin is scheme://host[:port], nothing more.",
                errors=[FieldError(f"/frame_ancestors/{i}", "not an origin")],
            )


def _version_and_form(
    conn: Connection,
    account_id: str,
    workflow_id: str,
    version: int | None,
    body: AppCreate | AppUpdate,
    row: Record | None = None,
) -> dict[str, Any]:
    """The pinned version and the form fields to store, checked against that version."""
    number = (
        version if version is not None else app_store.current_version(conn, account_id, workflow_id)
    )
    graph = (
        app_store.version_graph(conn, account_id, workflow_id, number)
        if number is not None
        else None
    )
    if graph is None:
        raise NotFound("No such workflow version.")
    if body.cover_asset_id is not None and not asset_store.get(
        conn, account_id, body.cover_asset_id
    ):
        raise NotFound("No such cover asset.")
    inputs = body.inputs
    if inputs is None and row is not None:
        inputs = [AppInput.model_validate(f) for f in row.inputs]
    outputs = body.outputs
    if outputs is None:
        assert row is not None
        outputs = [AppOutput.model_validate(o) for o in row.outputs]
    fields, shown = apps.form(graph, inputs, outputs)
    return {"workflow_version": number, "inputs": fields, "outputs": shown}


@router.post("/apps", status_code=status.HTTP_201_CREATED, response_model=AppOut, responses=_ERRORS)
async def create_app(
    body: AppCreate, request: Request, response: Response, principal: PrincipalDep, ctx: CtxDep
) -> AppOut:
    """Publish a saved version of a workflow (default: its current one) as an app."""
    _origins(body.frame_ancestors)
    password_hash = await asyncio.to_thread(hash_password, body.password) if body.password else None

    def create(conn: Connection) -> Record:
        checked = _version_and_form(
            conn, principal.account_id, body.workflow_id, body.workflow_version, body
        )
        return app_store.create(
            conn,
            account_id=principal.account_id,
            workflow_id=body.workflow_id,
            slug=apps.new_slug(),
            title=body.title,
            description=body.description,
            cover_asset_id=body.cover_asset_id,
            access=body.access,
            password_hash=password_hash,
            published=body.published,
            budget_daily=body.budget_daily,
            budget_total=body.budget_total,
            max_concurrent=body.max_concurrent,
            rate_per_visitor=body.rate_per_visitor,
            rate_per_ip=body.rate_per_ip,
            challenge_bits=body.challenge_bits,
            frame_ancestors=body.frame_ancestors,
            **checked,
        )

    row = await ctx.db.write(create)
    response.headers["Location"] = f"/api/v1/apps/{row.id}"
    return _out(request, ctx, row, (0, 0))


@router.get("/apps", response_model=list[AppOut])
async def list_apps(
    request: Request,
    principal: PrincipalDep,
    ctx: CtxDep,
    page: PageDep,
    workflow_id: WorkflowFilter = None,
) -> list[AppOut]:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header."""

    def read(conn: Connection) -> list[tuple[Record, tuple[int, int]]]:
        rows = app_store.page(conn, principal.account_id, page.limit, page.cursor, workflow_id)
        return [(row, _spent(conn, row.id)) for row in rows[: page.limit]] + [
            (row, (0, 0)) for row in rows[page.limit :]
        ]

    found = await ctx.db.read(read)
    rows = page.rows([r for r, _ in found])
    return [_out(request, ctx, row, spent) for row, spent in found[: len(rows)]]


@router.get("/apps/{app_id}", response_model=AppOut, responses=_ERRORS)
async def get_app(app_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep) -> AppOut:
    def read(conn: Connection) -> tuple[Record, tuple[int, int]]:
        row = app_store.get(conn, principal.account_id, app_id)
        if row is None:
            raise NotFound("No such app.")
        return row, _spent(conn, app_id)

    return _out(request, ctx, *await ctx.db.read(read))


@router.patch("/apps/{app_id}", response_model=AppOut, responses=_ERRORS)
async def update_app(
    app_id: str, body: AppUpdate, request: Request, principal: PrincipalDep, ctx: CtxDep
) -> AppOut:
    """Change what is sent. ``workflow_version`` publishes another saved version (the form
    is checked against it); ``"published": false`` unpublishes at once: the page and every
    visitor request answer 404 and open event streams end."""
    sent = body.model_fields_set
    for field in ("title", "description", "access", "inputs", "outputs", "published"):
        if field in sent and getattr(body, field) is None:
            message = f"{field} cannot be null"
            raise InvalidRequest(message, errors=[FieldError(f"/{field}", message)])
    for field in ("rate_per_visitor", "rate_per_ip", "frame_ancestors", "workflow_version"):
        if field in sent and getattr(body, field) is None:
            message = f"{field} cannot be null"
            raise InvalidRequest(message, errors=[FieldError(f"/{field}", message)])
    _origins(body.frame_ancestors)
    values: dict[str, Any] = {f: getattr(body, f) for f in sent if f in AppUpdate.model_fields}
    values.pop("password", None)
    if "password" in sent:
        values["password_hash"] = (
            await asyncio.to_thread(hash_password, body.password) if body.password else None
        )
    for field in ("inputs", "outputs"):
        if field in values:
            values.pop(field)

    def update(conn: Connection) -> tuple[Record, list[Record]]:
        row = app_store.get(conn, principal.account_id, app_id)
        if row is None:
            raise NotFound("No such app.")
        if {"workflow_version", "inputs", "outputs", "cover_asset_id"} & sent:
            values.update(
                _version_and_form(
                    conn,
                    principal.account_id,
                    row.workflow_id,
                    body.workflow_version or row.workflow_version,
                    body,
                    row,
                )
            )
        changed = app_store.update(conn, principal.account_id, app_id, values)
        assert changed is not None
        closing = app_store.running_runs(conn, app_id) if not changed.published else []
        return changed, closing

    row, closing = await ctx.db.write(update)
    await _close_streams(ctx, closing)
    spent = await ctx.db.read(lambda c: _spent(c, app_id))
    return _out(request, ctx, row, spent)


@router.delete(
    "/apps/{app_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_ERRORS,
)
async def delete_app(app_id: str, principal: PrincipalDep, ctx: CtxDep) -> Response:
    """Delete at once: its page answers 404 and open visitor streams end. The runs it
    started stay the owner's runs."""

    def delete(conn: Connection) -> list[Record]:
        closing = app_store.running_runs(conn, app_id)
        if not app_store.delete(conn, principal.account_id, app_id):
            raise NotFound("No such app.")
        return closing

    await _close_streams(ctx, await ctx.db.write(delete))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


async def _close_streams(ctx: AppContext, runs: list[Record]) -> None:
    """Tell the visitor streams of ``runs`` (on any process) that their app closed: a seq-0
    signal on each run, never written to a run's log (committed first, then announced)."""
    if runs:
        now = utcnow()
        await ctx.bus.publish(
            [Event(APP_CLOSED, 0, now, r.id, r.workflow_id, r.account_id) for r in runs]
        )
