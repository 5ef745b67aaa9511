"""Webhook triggers: management under a workflow, and the public trigger endpoint.

Management needs the workflow owner's credentials and a plan that allows it
(``auth/plans.py``). The trigger, ``POST /webhooks/{token}``, needs nothing but the token.
Its checks run cheapest-first, and nothing is counted or spent until the run is accepted:

    404 not_found              malformed, unknown or deleted token, deleted workflow, or
                               disabled account
    403 webhook_inactive       the webhook is switched off
    403 plan_upgrade_required  the owner's current plan is below pro
    429 rate_limited           already N accepted triggers in the last 60 s (a slot is
                               reserved here, given back if any check below refuses)
    415 unsupported_media_type Content-Type is not JSON
    403 forbidden              signature header missing, malformed or stale (signed webhooks)
    413 payload_too_large      over 1,048,576 bytes, refused while reading
    403 forbidden              signature does not match the body (signed webhooks)
    400 invalid_request        not valid JSON, or not a JSON object
    4xx (as an execute's)      a media input named by URL or data: URI that cannot be
                               fetched or taken (api/remote_media.py)
    402 insufficient_credits   (or 429 when a concurrent trigger took the last slot)
    202                        run created, credits held, then the trigger is counted

The token is the credential, so it is resolved first (as 401 precedes everything on
authenticated routes); the rest is ordered so that no body is read for a request that can
already be refused. See docs/webhooks.md.
"""

from __future__ import annotations

import re
import secrets
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response, status
from sqlalchemy.engine import Connection

from nodeloom.api import workflow_children
from nodeloom.api.body import is_json_content_type, parse_json_off_loop, read_limited
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import PageDep
from nodeloom.api.remote_media import bring_input_media
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.api.urls import public_base
from nodeloom.auth import signatures
from nodeloom.auth.plans import require_webhook_management, require_webhook_trigger
from nodeloom.auth.principal import Principal
from nodeloom.auth.tokens import decrypt, encrypt, keyed_hash
from nodeloom.engine import callbacks
from nodeloom.engine.run_request import ATTEMPTS, RunRequest, TriggerStale
from nodeloom.engine.transitions import WebhookAsRead
from nodeloom.errors import (
    Conflict,
    NodeloomError,
    NotFound,
    RateLimited,
    UnsupportedMediaType,
    WebhookInactive,
)
from nodeloom.ratelimit import Reservation
from nodeloom.schemas.webhooks import TriggerAccepted, WebhookCreate, WebhookOut, WebhookUpdate
from nodeloom.store import Record
from nodeloom.store import webhooks as webhook_store

router = APIRouter(route_class=GuardedRoute, tags=["webhooks"])

MAX_TRIGGER_BODY = 1_048_576
TOKEN_BYTES = 32
TOKEN_PURPOSE = "webhook-token"  # noqa: S105 - a hash domain separator, not a secret
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{32,128}")


async def get_webhook_manager(principal: PrincipalDep) -> Principal:
    require_webhook_management(principal)
    return principal


ManagerDep = Annotated[Principal, Depends(get_webhook_manager)]


def _token_hash(ctx: AppContext, token: str) -> str:
    return keyed_hash(ctx.settings.secret, token, TOKEN_PURPOSE)


def _out(ctx: AppContext, request: Request, row: Record) -> WebhookOut:
    token = decrypt(ctx.settings.secret, row.token_encrypted)
    if token is None:
        raise NodeloomError(f"webhook {row.id}: token does not decrypt with the server secret")
    base = public_base(ctx.settings.base_url, request.scope)
    return WebhookOut(
        id=row.id,
        workflow_id=row.workflow_id,
        name=row.name,
        token=token,
        url=f"{base}/api/v1/webhooks/{token}",
        active=row.active,
        signed=row.secret_encrypted is not None,
        callback_url=row.callback_url,
        created_at=row.created_at,
    )


_MANAGE_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"description": "The plan or credential does not allow webhooks (plan_upgrade_required)"},
    404: {"description": "No such workflow or webhook (not_found)"},
}


@router.post(
    "/workflows/{workflow_id}/webhooks",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookOut,
    responses=_MANAGE_ERRORS,
)
async def create_webhook(
    workflow_id: str, body: WebhookCreate, request: Request, principal: ManagerDep, ctx: CtxDep
) -> WebhookOut:
    """Create a trigger. ``token`` is 32 random bytes, base64url; the server keeps it
    encrypted (to show the URL again) and finds it by a keyed hash."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    secret = ctx.settings.secret
    await callbacks.check_url(ctx.settings, body.callback_url, "/callback_url")

    def create(conn: Connection) -> Record:
        workflow_children.require_workflow(conn, principal.account_id, workflow_id)
        if body.callback_url is not None:
            callbacks.require_secret(conn, principal.account_id, "/callback_url")
        return webhook_store.create(
            conn,
            account_id=principal.account_id,
            workflow_id=workflow_id,
            name=body.name,
            active=body.active,
            token_hash=_token_hash(ctx, token),
            token_encrypted=encrypt(secret, token),
            secret_encrypted=encrypt(secret, body.secret) if body.secret else None,
            callback_url=body.callback_url,
        )

    return _out(ctx, request, await ctx.db.write(create))


@router.get(
    "/workflows/{workflow_id}/webhooks",
    response_model=list[WebhookOut],
    responses=_MANAGE_ERRORS,
)
async def list_webhooks(
    workflow_id: str, request: Request, principal: ManagerDep, ctx: CtxDep, page: PageDep
) -> list[WebhookOut]:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header."""
    rows = await workflow_children.read_page(
        ctx, page, principal.account_id, workflow_id, webhook_store.page
    )
    return [_out(ctx, request, row) for row in rows]


def _found(conn: Connection, row: Record | bool, account_id: str, workflow_id: str) -> None:
    workflow_children.require_found(conn, row, account_id, workflow_id, "webhook")


@router.patch(
    "/workflows/{workflow_id}/webhooks/{webhook_id}",
    response_model=WebhookOut,
    responses=_MANAGE_ERRORS,
)
async def update_webhook(
    workflow_id: str,
    webhook_id: str,
    body: WebhookUpdate,
    request: Request,
    principal: ManagerDep,
    ctx: CtxDep,
) -> WebhookOut:
    """Rename, switch on or off (``active``), or set / remove (``null``) the signing secret.
    The token never changes: to rotate it, create a new webhook and delete the old one."""
    change_secret = "secret" in body.model_fields_set
    secret = encrypt(ctx.settings.secret, body.secret) if body.secret else None
    change_callback = "callback_url" in body.model_fields_set
    await callbacks.check_url(ctx.settings, body.callback_url, "/callback_url")

    def update(conn: Connection) -> Record:
        if body.callback_url is not None:
            callbacks.require_secret(conn, principal.account_id, "/callback_url")
        row = webhook_store.update(
            conn,
            principal.account_id,
            workflow_id,
            webhook_id,
            name=body.name,
            active=body.active,
            change_secret=change_secret,
            secret_encrypted=secret,
            change_callback=change_callback,
            callback_url=body.callback_url,
        )
        _found(conn, row, principal.account_id, workflow_id)
        return row

    return _out(ctx, request, await ctx.db.write(update))


@router.delete(
    "/workflows/{workflow_id}/webhooks/{webhook_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_MANAGE_ERRORS,
)
async def delete_webhook(
    workflow_id: str, webhook_id: str, principal: ManagerDep, ctx: CtxDep
) -> Response:
    """Delete at once: the very next trigger with its token gets 404."""
    return await workflow_children.delete(
        ctx, principal.account_id, workflow_id, webhook_id, webhook_store.soft_delete, "webhook"
    )


async def _parse_object(raw: bytes) -> dict[str, Any]:
    value: dict[str, Any] = await parse_json_off_loop(raw)
    return value


def _rate_limited(limit: int, reset_seconds: int, headers: dict[str, str]) -> RateLimited:
    return RateLimited(
        f"This webhook accepted {limit} triggers in the last 60 s; retry in {reset_seconds} s.",
        headers=headers,
    )


@router.post(
    "/webhooks/{token}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TriggerAccepted,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "additionalProperties": True},
                    "example": {"text": "A sunset over the sea", "category": "travel"},
                }
            },
        }
    },
    responses={
        400: {"description": "Not valid JSON, or not a JSON object (invalid_request)"},
        402: {"description": "Insufficient credits (insufficient_credits)"},
        403: {"description": "webhook_inactive, plan_upgrade_required or forbidden (signature)"},
        404: {"description": "Unknown or deleted webhook (not_found)"},
        413: {"description": f"Body over {MAX_TRIGGER_BODY:,} bytes (payload_too_large)"},
        415: {"description": "Content-Type is not JSON (unsupported_media_type)"},
        429: {"description": "Too many accepted triggers in 60 s (rate_limited)"},
    },
)
async def trigger(token: str, request: Request, ctx: CtxDep) -> dict[str, Any]:
    """Start a run of the webhook's workflow with the JSON object body as its input.
    The token in the path is the only credential."""
    if not _TOKEN_SHAPE.fullmatch(token):
        raise NotFound("No such webhook.")
    token_hash = _token_hash(ctx, token)
    # The webhook as this process last read it, else read now. A remembered one is checked
    # again by the acceptance transaction itself (``WebhookAsRead``), so the common trigger
    # costs no look-up of its own; a trigger refused on a remembered webhook is answered as
    # the webhook now is (read again), so every answer is that of a fresh look-up.
    target = ctx.trigger_targets.get(token_hash)
    remembered = target is not None
    if target is None:
        target = await _read_target(ctx, token_hash)
    body = _Body(request)
    for _ in range(ATTEMPTS):
        try:
            return await _trigger(ctx, request, target, body)
        except TriggerStale:
            fresh = await _read_target(ctx, token_hash)
        except Exception:
            if not remembered:
                raise
            fresh = await _read_target(ctx, token_hash)
            if fresh == target:
                raise
        target, remembered = fresh, False
    raise Conflict("The webhook was changed while the trigger was being accepted; retry.")


async def _read_target(ctx: AppContext, token_hash: str) -> webhook_store.TriggerTarget | None:
    target = await ctx.db.read(lambda c: webhook_store.for_trigger(c, token_hash))
    ctx.trigger_targets.remember(token_hash, target)
    return target


class _Body:
    """The trigger's body, read once (with its cap) however many times it is checked."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.raw: bytes | None = None
        self.refused: Exception | None = None

    async def read(self) -> bytes:
        if self.refused is not None:
            raise self.refused
        if self.raw is None:
            try:
                self.raw = await read_limited(self.request, MAX_TRIGGER_BODY)
            except Exception as exc:
                self.refused = exc
                raise
        return self.raw


async def _trigger(
    ctx: AppContext, request: Request, target: webhook_store.TriggerTarget | None, body: _Body
) -> dict[str, Any]:
    """The trigger's checks, in the documented order, and its acceptance."""
    if target is None:
        raise NotFound("No such webhook.")
    if not target.active:
        raise WebhookInactive("This webhook is inactive; its owner can switch it on again.")
    require_webhook_trigger(target.plan)

    key = f"webhook:{target.webhook_id}"
    limit = ctx.settings.rate_limit_webhook
    # Count only accepted triggers: a slot is reserved at once (one round trip to a shared
    # store, the check and the count in one) and given back if the trigger is refused for
    # any reason below, so two concurrent triggers can never both take the last slot.
    reservation: Reservation | None = None
    try:
        async with ctx.limiter.reserve(key, limit) as reservation:
            request.state.ratelimit = reservation.decision
            if not reservation.decision.allowed:
                refused = reservation.decision
                raise _rate_limited(limit, refused.reset_seconds, refused.headers())
            run_input = await _trigger_input(ctx, request, target, body)
            # Media named by URL or data: URI become assets now, inside the reservation:
            # a flood of triggers is refused before anything is fetched.
            run_input = await bring_input_media(
                ctx, target.account_id, str(target.plan), target.workflow_id, run_input
            )
            accepted = await ctx.acceptor.accept(
                RunRequest(
                    account_id=target.account_id,
                    workflow_id=target.workflow_id,
                    run_input=run_input,
                    use_cache=True,
                    plan=str(target.plan),
                    webhook_id=target.webhook_id,
                    trigger="webhook",
                    workflow_version=target.workflow_version,
                    callback_url=target.callback_url,
                    webhook_as_read=WebhookAsRead(str(target.plan), target.secret_encrypted),
                ),
            )
    finally:
        # Headers describe the window as it is after this request: a refused trigger gave
        # its slot back.
        if reservation is not None:
            request.state.ratelimit = reservation.decision
    return accepted.answer


async def _trigger_input(
    ctx: AppContext, request: Request, target: webhook_store.TriggerTarget, body: _Body
) -> dict[str, Any]:
    """The body as the run's input, after the checks that need no more than the headers
    (media type, the signature header's shape) and those that need the body."""
    if not is_json_content_type(request.headers.get("content-type")):
        raise UnsupportedMediaType("Send the body as Content-Type: application/json.")
    signature: tuple[int, list[str]] | None = None
    if target.secret_encrypted is not None:
        signature = signatures.parse_header(request.headers.get(signatures.HEADER))
    raw = await body.read()
    if signature is not None:
        secret = decrypt(ctx.settings.secret, target.secret_encrypted or "")
        if secret is None:
            raise NodeloomError(f"webhook {target.webhook_id}: secret does not decrypt")
        signatures.verify(secret, raw, *signature)
    return await _parse_object(raw)
