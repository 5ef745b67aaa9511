"""Uploads and assets: files an account brings, kept as one of our four types.

``POST /uploads`` takes multipart/form-data (a ``file`` part, an optional ``name`` field) or
a raw body (``?name=``), streamed to disk under the plan's size cap, decoded and converted
in the sandbox, stored, and counted against the plan's storage quota
(docs/media-inputs.md). Another account's asset answers 404 like an unknown id.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from nodeloom.api.body import body_doc, parse_json_off_loop, read_json, validated
from nodeloom.api.deps import CtxDep, PrincipalDep, bearer
from nodeloom.api.paging import PageDep
from nodeloom.api.routes.artifacts import blob_response, owned_or_signed
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.api.uploads import is_multipart, receive_form, receive_raw
from nodeloom.api.urls import public_base
from nodeloom.auth.principal import Principal
from nodeloom.auth.tokens import sign_url
from nodeloom.errors import (
    AssetInUse,
    FieldError,
    InvalidRequest,
    NotFound,
    StorageQuotaExceeded,
)
from nodeloom.schemas.assets import AssetKind, AssetOut, AssetUpdate, StorageOut
from nodeloom.schemas.runs import ExecuteRequest
from nodeloom.store import Record
from nodeloom.store import assets as asset_store
from nodeloom.uploads.accept import Ingestion, accept, plan_limits, work_folder
from nodeloom.uploads.received import ReceivedFile

router = APIRouter(route_class=GuardedRoute, tags=["assets"])

MAX_UPLOAD_BODY_SLACK = 1024 * 1024  # multipart framing and text fields beyond the file
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such asset in this account (not_found)"},
}
_DOWNLOAD: dict[int | str, dict[str, Any]] = {
    206: {"description": "Partial content (Range)"},
    304: {"description": "Not modified (If-None-Match)"},
    401: {"description": "No credential, or a bad or expired signature"},
    416: {"description": "Range not satisfiable"},
    **_ERRORS,
}
_UPLOAD_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "name": {"type": "string", "maxLength": 255},
                    },
                }
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


# The run's input object, the cache switch, and any number of file parts named by their keys.
EXECUTE_FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {
            "type": "string",
            "description": "The run's input object, as JSON; each file part adds its key.",
        },
        "cache": {"type": "string", "enum": ["true", "false"]},
    },
    "additionalProperties": {
        "type": "string",
        "format": "binary",
        "description": "A file for the input key named by the part: made an asset first.",
    },
}


def execute_doc(model: type[BaseModel]) -> dict[str, Any]:
    """The ``openapi_extra`` of execute: the optional JSON body ``model``, or multipart with
    files (:func:`execute_form`)."""
    doc = body_doc(model, required=False)
    doc["requestBody"]["content"]["multipart/form-data"] = {"schema": EXECUTE_FORM_SCHEMA}
    return doc


def _content_path(asset_id: str, part: str) -> str:
    return f"/api/v1/assets/{asset_id}/{part}"


def _signed(request: Request, ctx: AppContext, path: str) -> str:
    settings = ctx.settings
    query = sign_url(settings.secret, path, settings.signed_url_ttl_seconds)
    return f"{public_base(settings.base_url, request.scope)}{path}?{query}"


def asset_out(request: Request, ctx: AppContext, row: Record) -> AssetOut:
    thumbnail = None
    if row.thumbnail_sha256:
        thumbnail = _signed(request, ctx, _content_path(row.id, "thumbnail"))
    return AssetOut(
        id=row.id,
        name=row.name,
        kind=row.kind,
        content_type=row.content_type,
        size_bytes=row.size_bytes,
        sha256=row.sha256,
        source_format=row.source_format,
        source_sha256=row.source_sha256,
        width=row.width,
        height=row.height,
        duration_ms=row.duration_ms,
        video_codec=row.video_codec,
        audio_codec=row.audio_codec,
        tags=list(row.tags or []),
        created_at=row.created_at,
        download_url=_signed(request, ctx, _content_path(row.id, "content")),
        thumbnail_url=thumbnail,
    )


async def _get_or_404(ctx: AppContext, account_id: str, asset_id: str) -> Record:
    row = await ctx.db.read(lambda c: asset_store.get(c, account_id, asset_id))
    if row is None:
        raise NotFound("No such asset.")
    return row


def ingestion(ctx: AppContext) -> Ingestion:
    return Ingestion(ctx.settings, ctx.db, ctx.store, ctx.sandbox)


async def execute_form(request: Request, ctx: AppContext, principal: Principal) -> ExecuteRequest:
    """An execute sent as multipart/form-data, so one call brings its files: a JSON ``input``
    part (the run's input object), an optional ``cache`` part (``false`` turns reuse off),
    and file parts, each named by the input key it fills. Every file becomes an asset of the
    account (as ``POST /uploads`` makes it) and its key the asset's id. All files together
    are at most the plan's largest file."""
    fields, files = await form_with_files(request, ctx, principal.account_id, principal.plan)
    raw = fields.get("input")
    value = await parse_json_off_loop(raw.encode(), allow_empty=True) if raw else None
    run_input: dict[str, Any] = dict(value or {})
    run_input.update(files)
    body: dict[str, Any] = {"input": run_input or None}
    if fields.get("cache", "").strip().lower() == "false":
        body["cache"] = False
    return validated(ExecuteRequest, body)


async def form_with_files(
    request: Request, ctx: AppContext, account_id: str, plan: str
) -> tuple[dict[str, str], dict[str, str]]:
    """A multipart/form-data body's text fields, and its files made assets of the account
    (each by the part's name: the asset's id). All files together are at most the plan's
    largest file."""
    limits = plan_limits(ctx.settings, plan)
    files: dict[str, str] = {}
    async with work_folder(ctx.scratch) as work_dir:
        form = await receive_form(
            request, work_dir, limits.file_bytes, limits.file_bytes + MAX_UPLOAD_BODY_SLACK
        )
        for received in form.files:
            if not received.field:
                raise InvalidRequest(
                    "Each file part is named by the input key it fills.",
                    errors=[FieldError("form:", "a file part without a name")],
                )
            accepted = await accept(
                ingestion(ctx), account_id, plan, received, _name(None, received), work_dir
            )
            files[received.field] = accepted.asset.id
    return dict(form.fields), files


def _name(value: str | None, received: ReceivedFile) -> str:
    name = (value or received.filename or "").strip()[:255]
    return name or "upload"


@router.post(
    "/uploads",
    status_code=status.HTTP_201_CREATED,
    response_model=AssetOut,
    openapi_extra=_UPLOAD_DOC,
    responses={
        200: {"description": "The account already had this content: its asset", "model": AssetOut},
        400: {"description": "No file, or a malformed multipart body (invalid_request)"},
        402: {"description": "Over the plan's storage quota (storage_quota_exceeded)"},
        413: {
            "description": "Over the plan's file size (payload_too_large), pixels or length "
            "(media_limit_exceeded)"
        },
        415: {"description": "Not an image, audio or video we decode (unsupported_media)"},
        422: {"description": "Damaged or truncated (media_unreadable)"},
    },
)
async def upload(
    request: Request,
    response: Response,
    principal: PrincipalDep,
    ctx: CtxDep,
    name: Annotated[str | None, Query(max_length=255, description="Raw body: its name")] = None,
) -> AssetOut:
    """Upload a file; it becomes an asset of the account. Its kind is read from its content
    (never its name or Content-Type), and it is converted to PNG, MP3 or MP4 when needed,
    its EXIF removed. The same content uploaded again answers 200 with the same asset."""
    account_id = principal.account_id
    limits = plan_limits(ctx.settings, principal.plan)
    used = await ctx.db.read(lambda c: asset_store.used_bytes(c, account_id))
    if used >= limits.storage_bytes:
        raise StorageQuotaExceeded(1, used, limits.storage_bytes)
    async with work_folder(ctx.scratch) as work_dir:
        if is_multipart(request):
            form = await receive_form(
                request, work_dir, limits.file_bytes, limits.file_bytes + MAX_UPLOAD_BODY_SLACK
            )
            files = [f for f in form.files if f.field == "file"] or form.files
            if len(files) != 1:
                raise InvalidRequest(
                    "Send exactly one file, in a part named file.",
                    errors=[FieldError("form:file", "exactly one file part is required")],
                )
            received, chosen = files[0], form.fields.get("name")
        else:
            received = await receive_raw(request, work_dir, limits.file_bytes, None)
            chosen = name
        accepted = await accept(
            ingestion(ctx),
            account_id,
            principal.plan,
            received,
            _name(chosen, received),
            work_dir,
        )
    response.headers["Location"] = f"/api/v1/assets/{accepted.asset.id}"
    if not accepted.created:
        response.status_code = status.HTTP_200_OK
    return asset_out(request, ctx, accepted.asset)


@router.get("/assets", response_model=list[AssetOut])
async def list_assets(
    request: Request,
    principal: PrincipalDep,
    ctx: CtxDep,
    page: PageDep,
    kind: Annotated[AssetKind | None, Query(description="Only this kind")] = None,
    q: Annotated[
        str | None, Query(max_length=200, description="A part of the name or a tag")
    ] = None,
) -> list[AssetOut]:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header."""
    rows = await ctx.db.read(
        lambda c: asset_store.page(
            c, principal.account_id, page.limit, page.cursor, kind=kind, search=q
        )
    )
    return [asset_out(request, ctx, row) for row in page.rows(rows)]


@router.get("/storage", response_model=StorageOut)
async def storage(principal: PrincipalDep, ctx: CtxDep) -> StorageOut:
    """The bytes the account's assets take, its plan's quota and largest file."""
    account_id = principal.account_id
    limits = plan_limits(ctx.settings, principal.plan)
    used = await ctx.db.read(lambda c: asset_store.used_bytes(c, account_id))
    return StorageOut(
        used_bytes=used, quota_bytes=limits.storage_bytes, file_bytes=limits.file_bytes
    )


@router.get("/assets/{asset_id}", response_model=AssetOut, responses=_ERRORS)
async def get_asset(
    asset_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep
) -> AssetOut:
    return asset_out(request, ctx, await _get_or_404(ctx, principal.account_id, asset_id))


@router.patch(
    "/assets/{asset_id}",
    response_model=AssetOut,
    responses=_ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": AssetUpdate.model_json_schema()}},
        }
    },
)
async def update_asset(
    asset_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep
) -> AssetOut:
    """Rename (``name``) or replace the tags (``tags``)."""
    body = validated(AssetUpdate, await read_json(request, 64 * 1024))
    account_id = principal.account_id
    row = await ctx.db.write(
        lambda c: asset_store.update(c, account_id, asset_id, name=body.name, tags=body.tags)
    )
    if row is None:
        raise NotFound("No such asset.")
    return asset_out(request, ctx, row)


@router.delete(
    "/assets/{asset_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={
        **_ERRORS,
        409: {"description": "A workflow of the account uses it (asset_in_use)"},
    },
)
async def delete_asset(
    asset_id: str,
    principal: PrincipalDep,
    ctx: CtxDep,
    force: Annotated[bool, Query(description="Delete even if workflows use it")] = False,
) -> Response:
    """Delete the asset; its bytes no longer count against the quota. Refused (409
    ``asset_in_use``, listing the workflows) while a workflow of the account names it,
    unless ``?force=true``. Runs that already used it keep their artifacts."""
    account_id = principal.account_id

    def delete(conn: Any) -> tuple[Record | None, list[str]]:
        if not force:
            using = asset_store.workflows_using(conn, account_id, asset_id)
            if using and asset_store.get(conn, account_id, asset_id) is not None:
                return None, using
        return asset_store.delete(conn, account_id, asset_id), []

    row, using = await ctx.db.write(delete)
    if using:
        raise AssetInUse(
            f"The asset is used by {len(using)} workflow(s); change them or delete with "
            "?force=true.",
            extra={"workflows": using},
        )
    if row is None:
        raise NotFound("No such asset.")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


ExpQuery = Annotated[str | None, Query(max_length=20, description="Signed URL expiry")]
SigQuery = Annotated[str | None, Query(max_length=128, description="Signed URL signature")]


@router.get(
    "/assets/{asset_id}/{part}",
    response_class=Response,
    responses={200: {"description": "The file, or its thumbnail"}, **_DOWNLOAD},
)
async def asset_file(
    asset_id: str,
    part: Literal["content", "thumbnail"],
    request: Request,
    ctx: CtxDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    exp: ExpQuery = None,
    sig: SigQuery = None,
) -> Response:
    """The stored file (PNG, MP3 or MP4), or its thumbnail (a PNG of at most 256 px a
    side), served as artifact downloads are. Authorised by the owner's credentials or the
    signed URL of the asset's ``download_url`` / ``thumbnail_url``."""
    row = await owned_or_signed(
        request,
        ctx,
        _content_path(asset_id, part),
        credentials,
        exp,
        sig,
        by_id=lambda c: asset_store.any_account(c, asset_id),
        owned=lambda c, account: asset_store.get(c, account, asset_id),
    )
    if row is None:
        raise NotFound("No such asset.")
    if part == "content":
        sha256, size, stored_type, name = row.sha256, row.size_bytes, row.content_type, row.id
    elif row.thumbnail_sha256:
        sha256, size = row.thumbnail_sha256, row.thumbnail_bytes or 0
        stored_type, name = "image/png", f"{row.id}-thumbnail"
    else:
        raise NotFound("This asset has no thumbnail.")
    return blob_response(
        request, ctx.store, name=name, sha256=sha256, size=size, stored_type=stored_type
    )
