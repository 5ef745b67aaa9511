"""``POST /provider-hooks/replicate/{token}``: Replicate's webhook deliveries about the
prediction a node run waits on (nodes/adapters/hooks.py, nodes/adapters/replicate.py).

Checks, cheapest first; nothing is kept until the signature matches:

    404 not_found               the token is malformed or was not made by this server
    415 unsupported_media_type  Content-Type is not JSON
    401 invalid_signature       a webhook-* header missing or malformed, or a timestamp more
                                than 5 minutes off (a replayed delivery)
    413 payload_too_large       over MAX_HOOK_BODY bytes, refused while reading
    200 kept: false             no job with a signing secret is stored on the node run yet
                                (a delivery that beat the job's commit): nothing to check
                                it with, and nothing to say about the node
    401 invalid_signature       the signature does not match the body with the signing
                                secret stored (encrypted) with the node's job, whether the
                                node still waits or not: an unsigned caller learns nothing
    400 invalid_request         not a JSON object, or no prediction ``id`` or ``status``
    200 kept: false             the node no longer waits (finished, cancelled), a delivery
                                about another prediction, or one after a final one
    200 kept: true              kept on the node run, committed; the waiting node woken

The token is the route's only credential: it names the node run and carries an HMAC of it
with the server secret, so it cannot be made up. The delivery is kept in the database (the
truth, whichever process runs the node), then a signal on the event bus wakes the node
(engine/hook_signals.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from nodeloom.api.body import is_json_content_type, parse_json_off_loop, read_limited
from nodeloom.api.deps import CtxDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.auth.tokens import decrypt
from nodeloom.engine import hook_signals
from nodeloom.errors import InvalidRequest, InvalidSignature, NotFound, UnsupportedMediaType
from nodeloom.nodes.adapters import hooks, replicate
from nodeloom.schemas.webhooks import ProviderHookAck
from nodeloom.store import provider_jobs

router = APIRouter(route_class=GuardedRoute, tags=["provider hooks"])

# A delivery is the whole prediction, its input included: bound files are inline only up to
# NODELOOM_PROVIDER_INLINE_MAX_BYTES (adapters/bound.py), the larger ones are URLs.
MAX_HOOK_BODY = 16 * 1024 * 1024


@router.post(
    "/provider-hooks/replicate/{token}",
    response_model=ProviderHookAck,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "description": "A Replicate prediction, as GET /v1/predictions/{id}.",
                        "additionalProperties": True,
                    }
                }
            },
        }
    },
    responses={
        400: {"description": "Not a JSON object with a prediction id (invalid_request)"},
        401: {"description": "Signature missing, stale or wrong (invalid_signature)"},
        404: {"description": "Not a webhook URL this server made (not_found)"},
        413: {"description": f"Body over {MAX_HOOK_BODY:,} bytes (payload_too_large)"},
        415: {"description": "Content-Type is not JSON (unsupported_media_type)"},
    },
)
async def replicate_hook(token: str, request: Request, ctx: CtxDep) -> ProviderHookAck:
    """A Replicate webhook delivery (Standard Webhooks signature) about the prediction a
    node run waits on; see docs/providers.md. Only Replicate calls it."""
    target = hooks.node_run_of(ctx.settings.secret, replicate.KIND, token)
    if target is None:
        raise NotFound("No such webhook.")
    run_id, node_id = target
    if not is_json_content_type(request.headers.get("content-type")):
        raise UnsupportedMediaType("Send the body as Content-Type: application/json.")
    try:
        webhook_id, timestamp = hooks.signature_headers(request.headers)
    except hooks.BadDelivery as exc:
        raise InvalidSignature(str(exc)) from exc
    raw = await read_limited(request, MAX_HOOK_BODY)
    # The job as stored, whether the node still waits or not: the signature is checked
    # before anything is said about the node (deliver() decides whether it still waits).
    job = await ctx.db.read(lambda c: provider_jobs.get(c, run_id, node_id))
    sealed = job.get("hook_secret") if job is not None else None
    if job is None or job.get("provider") != replicate.KIND or not isinstance(sealed, str):
        return ProviderHookAck(kept=False)
    secret = decrypt(ctx.settings.secret, sealed)
    try:
        if secret is None:
            raise hooks.BadDelivery("the stored signing secret does not decrypt")
        hooks.verify(
            secret, webhook_id, timestamp, raw, request.headers.get("webhook-signature", "")
        )
    except hooks.BadDelivery as exc:
        raise InvalidSignature(str(exc)) from exc
    prediction: Any = await parse_json_off_loop(raw)
    prediction_id = prediction.get("id")
    known = replicate.RUNNING | replicate.FINAL
    if not isinstance(prediction_id, str) or not prediction_id:
        raise InvalidRequest("A prediction with an id is expected.")
    if prediction.get("status") not in known:
        raise InvalidRequest(f"A prediction's status is one of {', '.join(sorted(known))}.")
    state = hooks.delivered_state(prediction)
    woken = await ctx.db.write(
        lambda c: provider_jobs.deliver(c, run_id, node_id, prediction_id, state, replicate.FINAL)
    )
    if woken is None:
        return ProviderHookAck(kept=False)
    account_id, workflow_id = woken
    await hook_signals.wake(ctx.bus, account_id, workflow_id, run_id, node_id)
    return ProviderHookAck(kept=True)
