"""Schedules under a workflow: create, list, get, change, pause, delete.

Management follows the webhook plan rules (auth/plans.py): schedules are triggers. How and
when they fire is engine/schedules.py; docs/schedules.md is the user's guide.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status
from sqlalchemy.engine import Connection

from nodeloom.api import workflow_children
from nodeloom.api.deps import CtxDep
from nodeloom.api.paging import PageDep
from nodeloom.api.routes.webhooks import ManagerDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.db.dialect import serialize
from nodeloom.engine import callbacks, schedules
from nodeloom.errors import Conflict, FieldError, InvalidRequest
from nodeloom.schemas.schedules import ScheduleCreate, ScheduleOut, ScheduleUpdate
from nodeloom.store import Record
from nodeloom.store import schedules as schedule_store

router = APIRouter(route_class=GuardedRoute, tags=["schedules"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "description": "Bad cron expression, unknown time zone or callback URL (invalid_request)"
    },
    403: {"description": "The plan or credential does not allow triggers (plan_upgrade_required)"},
    404: {"description": "No such workflow or schedule (not_found)"},
    409: {"description": "As many schedules as the plan allows (conflict)"},
}


def _out(row: Record) -> ScheduleOut:
    return ScheduleOut.model_validate(row, from_attributes=True)


def _check(ctx: AppContext, cron: str, timezone: str) -> None:
    schedules.check(cron, timezone, ctx.settings.schedule_min_interval_seconds)


def _within_caps(
    ctx: AppContext, conn: Connection, account_id: str, plan: str, workflow_id: str
) -> None:
    """409 when the workflow or the account has as many schedules as its plan allows. The
    account's creations are serialized, so two at once cannot both take the last place."""
    serialize(conn, f"schedules:{account_id}")
    settings = ctx.settings
    per_workflow = settings.schedules_per_workflow.get(plan)
    if per_workflow is not None and schedule_store.count(conn, account_id, workflow_id) >= (
        per_workflow
    ):
        raise Conflict(
            f"A workflow may have at most {per_workflow} schedules on the {plan} plan; "
            "delete one first."
        )
    per_account = settings.schedules_per_account.get(plan)
    if per_account is not None and schedule_store.count(conn, account_id) >= per_account:
        raise Conflict(
            f"An account may have at most {per_account} schedules on the {plan} plan; "
            "delete one first."
        )


@router.post(
    "/workflows/{workflow_id}/schedules",
    status_code=status.HTTP_201_CREATED,
    response_model=ScheduleOut,
    responses=_ERRORS,
)
async def create_schedule(
    workflow_id: str, body: ScheduleCreate, principal: ManagerDep, ctx: CtxDep
) -> ScheduleOut:
    """Create a schedule; ``next_run_at`` says when it fires first."""
    _check(ctx, body.cron, body.timezone)
    await callbacks.check_url(ctx.settings, body.callback_url, "/callback_url")
    next_run_at = schedules.first_run_at(body.cron, body.timezone, body.active)

    def create(conn: Connection) -> Record:
        workflow_children.require_workflow(conn, principal.account_id, workflow_id)
        _within_caps(ctx, conn, principal.account_id, principal.plan, workflow_id)
        if body.callback_url is not None:
            callbacks.require_secret(conn, principal.account_id, "/callback_url")
        return schedule_store.create(
            conn,
            account_id=principal.account_id,
            workflow_id=workflow_id,
            name=body.name,
            cron=body.cron,
            timezone=body.timezone,
            input=body.input,
            active=body.active,
            callback_url=body.callback_url,
            next_run_at=next_run_at,
        )

    return _out(await ctx.db.write(create))


@router.get(
    "/workflows/{workflow_id}/schedules", response_model=list[ScheduleOut], responses=_ERRORS
)
async def list_schedules(
    workflow_id: str, principal: ManagerDep, ctx: CtxDep, page: PageDep
) -> list[ScheduleOut]:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header."""
    rows = await workflow_children.read_page(
        ctx, page, principal.account_id, workflow_id, schedule_store.page
    )
    return [_out(row) for row in rows]


def _found(conn: Connection, row: Record | bool, account_id: str, workflow_id: str) -> None:
    workflow_children.require_found(conn, row, account_id, workflow_id, "schedule")


@router.get(
    "/workflows/{workflow_id}/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=_ERRORS,
)
async def get_schedule(
    workflow_id: str, schedule_id: str, principal: ManagerDep, ctx: CtxDep
) -> ScheduleOut:
    def read(conn: Connection) -> Record:
        row = schedule_store.get(conn, principal.account_id, workflow_id, schedule_id)
        _found(conn, row, principal.account_id, workflow_id)
        return row

    return _out(await ctx.db.read(read))


@router.patch(
    "/workflows/{workflow_id}/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=_ERRORS,
)
async def update_schedule(
    workflow_id: str, schedule_id: str, body: ScheduleUpdate, principal: ManagerDep, ctx: CtxDep
) -> ScheduleOut:
    """Change what is sent. Changing the expression or the zone, or switching a schedule on,
    computes ``next_run_at`` afresh from now (a paused schedule does not catch up)."""
    sent = body.model_fields_set
    for field in ("name", "cron", "timezone", "active"):
        if field in sent and getattr(body, field) is None:
            message = f"{field} cannot be null"
            raise InvalidRequest(message, errors=[FieldError(f"/{field}", message)])
    if "callback_url" in sent:
        await callbacks.check_url(ctx.settings, body.callback_url, "/callback_url")

    def update(conn: Connection) -> Record:
        row: Record = schedule_store.get(conn, principal.account_id, workflow_id, schedule_id)
        _found(conn, row, principal.account_id, workflow_id)
        values: dict[str, Any] = {
            f: getattr(body, f) for f in sent if f in ScheduleUpdate.model_fields
        }
        cron = values.get("cron", row.cron)
        timezone = values.get("timezone", row.timezone)
        active = values.get("active", row.active)
        if "cron" in values or "timezone" in values:
            _check(ctx, cron, timezone)
        if values.get("callback_url") is not None:
            callbacks.require_secret(conn, principal.account_id, "/callback_url")
        if {"cron", "timezone", "active"} & values.keys() and (
            not active or not row.active or cron != row.cron or timezone != row.timezone
        ):
            values["next_run_at"] = schedules.first_run_at(cron, timezone, active)
        changed = schedule_store.update(
            conn, principal.account_id, workflow_id, schedule_id, values
        )
        assert changed is not None
        return changed

    return _out(await ctx.db.write(update))


@router.delete(
    "/workflows/{workflow_id}/schedules/{schedule_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_ERRORS,
)
async def delete_schedule(
    workflow_id: str, schedule_id: str, principal: ManagerDep, ctx: CtxDep
) -> Response:
    """Delete at once: it never fires again. Runs it started stay."""
    return await workflow_children.delete(
        ctx, principal.account_id, workflow_id, schedule_id, schedule_store.delete, "schedule"
    )
