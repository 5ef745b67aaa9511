"""Provider credentials of the account: create, list, get, update (rotate), delete, test.

No answer ever carries a secret: the secret fields are encrypted with the server secret as
they arrive, and only ``hint`` (the masked secret) and the non-secret fields are shown.
Another account's credential is 404, like a missing one. See docs/providers.md.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Response, status
from sqlalchemy.engine import Connection

from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import PageDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.auth.tokens import decrypt, encrypt
from nodeloom.errors import FieldError, InvalidRequest, NotFound, ProviderError
from nodeloom.nodes.adapters import policy
from nodeloom.nodes.adapters.policy import Credential
from nodeloom.nodes.provider_registry import BY_KIND, HOSTED, hosted_pattern
from nodeloom.schemas.credentials import (
    KINDS,
    CredentialCreate,
    CredentialKindOut,
    CredentialOut,
    CredentialTestResult,
    CredentialUpdate,
    ModelSchemaOut,
    changed_fields,
    hint,
    kind_out,
    out,
    parse_fields,
)
from nodeloom.store import Record
from nodeloom.store import credentials as credential_store

router = APIRouter(route_class=GuardedRoute, tags=["credentials"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such credential in this account (not_found)"},
}
# A kind's connection test is its provider's (nodes/provider_registry.py); kinds without one
# (see GET /credential-kinds) answer ``ok: false`` and say so.
NO_TEST = "no connection test for this kind yet"


def _sealed(ctx: AppContext, secret: dict[str, str]) -> str:
    return encrypt(ctx.settings.secret, orjson.dumps(secret).decode())


async def _get_or_404(ctx: AppContext, account_id: str, credential_id: str) -> Record:
    row = await ctx.db.read(lambda c: credential_store.get(c, account_id, credential_id))
    if row is None:
        raise NotFound("No such credential.")
    return row


@router.get("/credential-kinds", response_model=list[CredentialKindOut])
async def list_credential_kinds(principal: PrincipalDep, ctx: CtxDep) -> list[CredentialKindOut]:
    """The kinds of credential this server stores: each field (secret or not, required or
    with its default), whether it has a connection test, and which node types take it."""
    takers: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for node in ctx.registry:
        spec = node.spec
        if "credential" in spec.params.model_fields:
            for kind in spec.credential_kinds:
                takers.setdefault(kind, []).append(spec.type)
    return [kind_out(kind, sorted(takers[kind])) for kind in KINDS]


@router.post(
    "/credentials",
    status_code=status.HTTP_201_CREATED,
    response_model=CredentialOut,
    responses={400: {"description": "Unknown kind or invalid fields (invalid_request)"}},
)
async def create_credential(
    body: CredentialCreate, principal: PrincipalDep, ctx: CtxDep
) -> CredentialOut:
    """Store a credential. Its secret fields are encrypted at once and never returned."""
    fields = parse_fields(body.kind, body.fields)
    secret = fields.secret()
    row = await ctx.db.write(
        lambda c: credential_store.create(
            c,
            account_id=principal.account_id,
            name=body.name,
            kind=body.kind,
            fields=fields.public(),
            secret_encrypted=_sealed(ctx, secret),
            hint=hint(secret),
        )
    )
    return out(row)


@router.get("/credentials", response_model=list[CredentialOut])
async def list_credentials(
    principal: PrincipalDep, ctx: CtxDep, page: PageDep
) -> list[CredentialOut]:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header."""
    rows = await ctx.db.read(
        lambda c: credential_store.page(c, principal.account_id, page.limit, page.cursor)
    )
    return [out(row) for row in page.rows(rows)]


@router.get("/credentials/{credential_id}", response_model=CredentialOut, responses=_ERRORS)
async def get_credential(credential_id: str, principal: PrincipalDep, ctx: CtxDep) -> CredentialOut:
    return out(await _get_or_404(ctx, principal.account_id, credential_id))


@router.patch("/credentials/{credential_id}", response_model=CredentialOut, responses=_ERRORS)
async def update_credential(
    credential_id: str, body: CredentialUpdate, principal: PrincipalDep, ctx: CtxDep
) -> CredentialOut:
    """Rename, or change fields: a secret field sent replaces the stored secret (rotation:
    the next run uses it); non-secret fields sent replace theirs, the others are kept."""
    account_id = principal.account_id
    fields: dict[str, Any] | None = None
    sealed: str | None = None
    masked: str | None = None
    if body.kind is not None or body.fields is not None:
        row = await _get_or_404(ctx, account_id, credential_id)
        if body.kind is not None and body.kind != row.kind:
            raise InvalidRequest(
                "A credential's kind cannot change; create a credential of the other kind.",
                errors=[FieldError("/kind", f"this credential is of kind {row.kind}")],
            )
    if body.fields is not None:
        fields, secret = changed_fields(row.kind, dict(row.fields), body.fields)
        if secret is not None:
            sealed, masked = _sealed(ctx, secret), hint(secret)
        else:
            sealed, masked = row.secret_encrypted, row.hint

    def update(conn: Connection) -> Record:
        row = credential_store.update(
            conn,
            account_id,
            credential_id,
            name=body.name,
            fields=fields,
            secret_encrypted=sealed,
            hint=masked,
        )
        if row is None:
            raise NotFound("No such credential.")
        return row

    return out(await ctx.db.write(update))


@router.delete(
    "/credentials/{credential_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_ERRORS,
)
async def delete_credential(credential_id: str, principal: PrincipalDep, ctx: CtxDep) -> Response:
    """Delete at once. Workflows that name it then show a warning, and are refused at
    execute (400 invalid_graph) until they name another."""
    account_id = principal.account_id
    if not await ctx.db.write(lambda c: credential_store.delete(c, account_id, credential_id)):
        raise NotFound("No such credential.")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/credentials/{credential_id}/test",
    response_model=CredentialTestResult,
    responses=_ERRORS,
)
async def test_credential(
    credential_id: str, principal: PrincipalDep, ctx: CtxDep
) -> CredentialTestResult:
    """Try the credential on the provider's cheapest authenticated call (openai: ``GET
    {base_url}/models``; elevenlabs: ``GET {base_url}/v1/user``; replicate: ``GET /v1/account``;
    fal: ``GET https://api.fal.ai/v1/models/pricing``, which needs a valid key and costs
    nothing; comfyui: ``GET {base_url}/system_stats``), through the same address
    check as HttpRequest, with a short timeout. ``ok`` says whether the provider accepted
    it; its error is quoted. Kinds without a test (see GET /credential-kinds) answer
    ``ok: false`` and say so."""
    row = await _get_or_404(ctx, principal.account_id, credential_id)
    provider = BY_KIND.get(row.kind)
    test = provider.test if provider is not None else None
    if test is None:
        return CredentialTestResult(ok=False, message=NO_TEST)
    plain = decrypt(ctx.settings.secret, row.secret_encrypted)
    if plain is None:
        return CredentialTestResult(
            ok=False, message="the secret does not decrypt with this server's secret"
        )
    credential = Credential(row.id, row.kind, dict(row.fields), orjson.loads(plain))
    ok, answered, message = await test(ctx.settings, credential)
    return CredentialTestResult(ok=ok, status=answered, message=message)


# ----------------------------------------------------------------------------- model schemas

SCHEMA_TTL = 60.0  # seconds a model's schema is kept per (credential, token, model)
SCHEMA_CACHE_MAX = 256
_schemas: OrderedDict[tuple[str, str, str], tuple[float, ModelSchemaOut]] = OrderedDict()
ModelQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=200,
        pattern=hosted_pattern(),
        description="Replicate: owner/name (its latest version) or owner/name:version; fal: "
        "an endpoint id such as fal-ai/flux/dev.",
    ),
]


def _cached(key: tuple[str, str, str]) -> ModelSchemaOut | None:
    found = _schemas.get(key)
    if found is None or found[0] < time.monotonic():
        _schemas.pop(key, None)
        return None
    return found[1]


def _keep(key: tuple[str, str, str], answer: ModelSchemaOut) -> None:
    _schemas[key] = (time.monotonic() + SCHEMA_TTL, answer)
    _schemas.move_to_end(key)
    while len(_schemas) > SCHEMA_CACHE_MAX:
        _schemas.popitem(last=False)


@router.get(
    "/credentials/{credential_id}/model-schema",
    response_model=ModelSchemaOut,
    responses={
        400: {
            "description": "Not a replicate or fal credential, or a malformed model "
            "(invalid_request)"
        },
        404: {
            "description": "No such credential in this account, or the provider has no such "
            "model (not_found, the provider quoted)"
        },
        502: {"description": "The provider refused, failed or timed out (provider_error, quoted)"},
    },
)
async def model_schema(
    credential_id: str, model: ModelQuery, principal: PrincipalDep, ctx: CtxDep
) -> ModelSchemaOut:
    """The input (and output) JSON schema the provider publishes for ``model``, read with this
    credential through the address check, within 10 s. replicate: ``GET
    /v1/models/{owner}/{name}`` (its ``latest_version``) or ``GET
    /v1/models/{owner}/{name}/versions/{id}``; fal: ``GET https://api.fal.ai/v1/models?
    endpoint_id={model}&expand=openapi-3.0`` (the endpoint's OpenAPI document). Local
    ``$ref``s are resolved; ``x-order`` gives the fields' order. The editor makes the model
    node's input form of it. Kept 60 s per credential and model."""
    row = await _get_or_404(ctx, principal.account_id, credential_id)
    hosted = HOSTED.get(row.kind)
    if hosted is None:
        raise InvalidRequest(
            f"credential {credential_id} is a {row.kind} credential; model schemas are read "
            f"with a {' or '.join(HOSTED)} credential"
        )
    try:
        hosted.check_model(model)
    except ValueError as exc:
        raise InvalidRequest(str(exc), errors=[FieldError("query:model", str(exc))]) from exc
    plain = decrypt(ctx.settings.secret, row.secret_encrypted)
    if plain is None:
        raise ProviderError("the credential's secret does not decrypt with this server's secret")
    token = str(orjson.loads(plain).get(hosted.key_field) or "")
    key = (row.id, hashlib.sha256(token.encode()).hexdigest(), model)
    cached = _cached(key)
    if cached is not None:
        return cached
    try:
        found = await hosted.model_schema(ctx.settings, token, model)
    except policy.ProviderError as exc:
        if exc.status == 404:
            raise NotFound(exc.message) from exc
        raise ProviderError(exc.message) from exc
    except LookupError as exc:
        raise NotFound(str(exc)) from exc
    answer = ModelSchemaOut(**found)
    _keep(key, answer)
    return answer
