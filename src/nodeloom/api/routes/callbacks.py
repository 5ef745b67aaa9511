"""Run callbacks: the account's signing secret and a run's delivery log.

The secret is shown once, in the answer that creates (or rotates) it, and kept encrypted
with the server secret. Rotating replaces it at once: the next attempt of every pending
delivery is signed with the new one. How deliveries are sent is engine/callbacks.py;
docs/callbacks.md is the user's guide.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status
from sqlalchemy.engine import Connection

from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.auth.tokens import encrypt
from nodeloom.db.models import utcnow
from nodeloom.engine import callbacks
from nodeloom.errors import NotFound
from nodeloom.schemas.callbacks import (
    CallbackDeliveryOut,
    CallbackSecretCreated,
    CallbackSecretInfo,
)
from nodeloom.store import Record
from nodeloom.store import callbacks as callback_store
from nodeloom.store import runs as run_store

router = APIRouter(route_class=GuardedRoute, tags=["callbacks"])


@router.post(
    "/callbacks/secret",
    status_code=status.HTTP_201_CREATED,
    response_model=CallbackSecretCreated,
)
async def rotate_secret(principal: PrincipalDep, ctx: CtxDep) -> CallbackSecretCreated:
    """Create the account's callback signing secret, or replace it (rotation). The value is
    in this answer only."""
    secret = callbacks.new_secret()
    encrypted = encrypt(ctx.settings.secret, secret)
    now = utcnow()
    await ctx.db.write(lambda c: callback_store.set_secret(c, principal.account_id, encrypted, now))
    return CallbackSecretCreated(secret=secret, created_at=now)


@router.get(
    "/callbacks/secret",
    response_model=CallbackSecretInfo,
    responses={404: {"description": "The account has no signing secret yet (not_found)"}},
)
async def secret_info(principal: PrincipalDep, ctx: CtxDep) -> CallbackSecretInfo:
    """When the current secret was made (never the secret itself)."""
    row = await ctx.db.read(lambda c: callback_store.secret_of(c, principal.account_id))
    if row is None or row.callback_secret_created_at is None:
        raise NotFound("This account has no callback signing secret yet.")
    return CallbackSecretInfo(created_at=row.callback_secret_created_at)


def _delivery_out(delivery: Record, attempts: list[Record]) -> dict[str, Any]:
    pending = delivery.state == callback_store.PENDING
    return {
        "id": delivery.id,
        "run_id": delivery.run_id,
        "url": delivery.url,
        "state": delivery.state,
        "attempt_count": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at if pending else None,
        "created_at": delivery.created_at,
        "finished_at": delivery.finished_at,
        "attempts": [
            {
                "attempt": a.attempt,
                "at": a.at,
                "duration_ms": a.duration_ms,
                "status_code": a.status_code,
                "response": a.response,
                "error": a.error,
            }
            for a in attempts
        ],
    }


@router.get(
    "/workflows/{workflow_id}/runs/{run_id}/callbacks",
    response_model=list[CallbackDeliveryOut],
    responses={404: {"description": "No such workflow or run (not_found)"}},
)
async def run_callbacks(
    workflow_id: str, run_id: str, principal: PrincipalDep, ctx: CtxDep
) -> list[dict[str, Any]]:
    """The run's callback delivery (an empty list when it was started without one), with
    every attempt: when, the status code, the start of the answer or the error."""

    def read(conn: Connection) -> list[dict[str, Any]]:
        if run_store.owned(conn, principal.account_id, run_id, workflow_id) is None:
            raise NotFound("No such run of this workflow.")
        return [_delivery_out(d, a) for d, a in callback_store.of_run(conn, run_id)]

    return await ctx.db.read(read)
