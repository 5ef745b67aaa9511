"""Resumable uploads with the tus 1.0 protocol (core, creation, termination, expiration) at
``/api/v1/uploads/tus``, for large files on unsteady links (ADR 0038, docs/media-inputs.md).

``POST`` creates an upload of ``Upload-Length`` bytes (its name from the ``filename`` of
``Upload-Metadata``), ``HEAD`` tells how many bytes arrived (``Upload-Offset``), ``PATCH``
(``application/offset+octet-stream``) adds bytes at exactly that offset (409 otherwise),
``DELETE`` drops it. When the last byte arrives the file goes through the ingest of
``POST /uploads``; the answer, and any later ``HEAD``, carry ``Nodeloom-Asset-Id``, and
``GET`` describes the upload as JSON. Authorised as every API route; another account's
upload reads as unknown. The work is in uploads/tus.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from email.utils import format_datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response, status
from starlette.requests import ClientDisconnect

from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.routes.assets import asset_out, ingestion
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.api.urls import public_base
from nodeloom.errors import FieldError, InvalidRequest, PreconditionFailed, UnsupportedMediaType
from nodeloom.schemas.assets import TusUploadOut
from nodeloom.store import Record
from nodeloom.store import assets as asset_store
from nodeloom.uploads import tus
from nodeloom.uploads.accept import plan_limits
from nodeloom.uploads.tus_parts import FileParts, Parts, S3Parts

router = APIRouter(route_class=GuardedRoute, tags=["uploads"])

PATH = "/uploads/tus"
VERSION = "1.0.0"
EXTENSIONS = "creation,termination,expiration"
OFFSET_TYPE = "application/offset+octet-stream"
TUS_HEADERS = {"Tus-Resumable": VERSION}
_EXPOSED = (
    "Upload-Offset, Upload-Length, Upload-Metadata, Upload-Expires, Location, "
    "Tus-Resumable, Tus-Version, Tus-Extension, Tus-Max-Size, Nodeloom-Asset-Id"
)
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such upload in this account, or it expired (not_found)"},
    412: {"description": "Tus-Resumable missing or not 1.0.0 (precondition_failed)"},
}
TusResumable = Annotated[str | None, Header(alias="Tus-Resumable", include_in_schema=True)]


def parts_of(ctx: AppContext) -> Parts:
    """Where this server keeps the bytes of unfinished uploads (uploads/tus_parts.py)."""
    if ctx.tus_parts is None:
        settings = ctx.settings
        if settings.artifact_store == "s3":
            from nodeloom.artifacts.s3_multipart import MultipartClient

            ctx.tus_parts = S3Parts(MultipartClient(settings))
        else:
            fsync = settings.sqlite_synchronous == "FULL" or not ctx.db.is_sqlite
            ctx.tus_parts = FileParts(settings.data_dir / "uploads", fsync=fsync)
    return ctx.tus_parts


def _check_version(value: str | None) -> None:
    if value != VERSION:
        raise PreconditionFailed(
            f"Send Tus-Resumable: {VERSION}, the only tus version this server speaks.",
            headers={**TUS_HEADERS, "Tus-Version": VERSION},
            errors=[FieldError("header:tus-resumable", f"must be {VERSION}")],
        )


def _number(value: str | None, header: str) -> int:
    if value is None or not value.isdigit() or len(value) > 19:
        raise InvalidRequest(
            f"{header} must be a whole number of bytes.",
            headers=TUS_HEADERS,
            errors=[FieldError(f"header:{header.lower()}", "a non-negative integer")],
        )
    return int(value)


def _state_headers(row: Record) -> dict[str, str]:
    headers = {
        **TUS_HEADERS,
        "Upload-Offset": str(row.offset_bytes),
        "Upload-Length": str(row.length),
        "Upload-Expires": format_datetime(row.expires_at, usegmt=True),
        "Cache-Control": "no-store",
        "Access-Control-Expose-Headers": _EXPOSED,
    }
    if row.upload_metadata:
        headers["Upload-Metadata"] = row.upload_metadata
    if row.asset_id:
        headers["Nodeloom-Asset-Id"] = row.asset_id
    if row.problem:
        headers["Nodeloom-Upload-Problem"] = str(row.problem.get("code", ""))
    return headers


def _with_tus(exc: Exception) -> Exception:
    headers = getattr(exc, "headers", None)
    if isinstance(headers, dict):
        headers.update(TUS_HEADERS)
    return exc


@router.options(PATH, status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
async def tus_options(principal: PrincipalDep, ctx: CtxDep) -> Response:
    """What the server supports: the tus version, extensions and the largest upload this
    account's plan allows."""
    limits = plan_limits(ctx.settings, principal.plan)
    return Response(
        status_code=status.HTTP_204_NO_CONTENT,
        headers={
            **TUS_HEADERS,
            "Tus-Version": VERSION,
            "Tus-Extension": EXTENSIONS,
            "Tus-Max-Size": str(limits.file_bytes),
        },
    )


@router.post(
    PATH,
    status_code=status.HTTP_201_CREATED,
    response_class=Response,
    responses={
        201: {"description": "Created; its URL is in Location"},
        400: {"description": "Upload-Length or Upload-Metadata malformed (invalid_request)"},
        402: {"description": "Over the plan's storage quota (storage_quota_exceeded)"},
        413: {"description": "Over the plan's file size (payload_too_large)"},
        412: _ERRORS[412],
    },
)
async def tus_create(
    request: Request,
    principal: PrincipalDep,
    ctx: CtxDep,
    tus_resumable: TusResumable = None,
    upload_length: Annotated[str | None, Header(alias="Upload-Length")] = None,
    upload_metadata: Annotated[str | None, Header(alias="Upload-Metadata")] = None,
) -> Response:
    """Create a resumable upload of ``Upload-Length`` bytes. The length counts against the
    plan's largest file and, held until the upload ends, against the storage quota."""
    try:
        _check_version(tus_resumable)
        length = _number(upload_length, "Upload-Length")
        row = await tus.create(
            ingestion(ctx),
            parts_of(ctx),
            principal.account_id,
            principal.plan,
            length,
            upload_metadata,
        )
    except Exception as exc:
        raise _with_tus(exc) from None
    location = f"{public_base(ctx.settings.base_url, request.scope)}/api/v1{PATH}/{row.id}"
    headers = {**_state_headers(row), "Location": location}
    return Response(status_code=status.HTTP_201_CREATED, headers=headers)


@router.head(f"{PATH}/{{upload_id}}", response_class=Response, responses=_ERRORS)
async def tus_head(
    upload_id: str, principal: PrincipalDep, ctx: CtxDep, tus_resumable: TusResumable = None
) -> Response:
    """How many bytes arrived (``Upload-Offset``), and the asset once it is made."""
    try:
        _check_version(tus_resumable)
        row = await tus.get(ingestion(ctx), principal.account_id, upload_id)
    except Exception as exc:
        raise _with_tus(exc) from None
    return Response(status_code=status.HTTP_200_OK, headers=_state_headers(row))


def _declared(request: Request) -> int | None:
    value = request.headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


async def _until_disconnect(request: Request) -> AsyncIterator[bytes]:
    """The body; it just ends if the client goes away (tus keeps what arrived)."""
    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        return


@router.patch(
    f"{PATH}/{{upload_id}}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {OFFSET_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
    responses={
        204: {"description": "Stored; Upload-Offset says up to where"},
        400: {"description": "Upload-Offset missing or malformed (invalid_request)"},
        402: {"description": "The asset is over the storage quota (storage_quota_exceeded)"},
        409: {"description": "Upload-Offset is not the upload's, or another request writes it"},
        413: {
            "description": "The body goes past Upload-Length (payload_too_large), or the "
            "media past the plan's pixels or length (media_limit_exceeded)"
        },
        415: {"description": "Not application/offset+octet-stream, or not a media file"},
        422: {"description": "The complete file is damaged or truncated (media_unreadable)"},
        **_ERRORS,
    },
)
async def tus_patch(
    upload_id: str,
    request: Request,
    principal: PrincipalDep,
    ctx: CtxDep,
    tus_resumable: TusResumable = None,
    upload_offset: Annotated[str | None, Header(alias="Upload-Offset")] = None,
) -> Response:
    """Add the body at ``Upload-Offset``. With the last byte the file is made an asset (as
    ``POST /uploads`` does: it can answer that problem) and ``Nodeloom-Asset-Id`` tells it.
    An empty PATCH at the end of a complete upload whose ingest was cut short tries again."""
    try:
        _check_version(tus_resumable)
        content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != OFFSET_TYPE:
            raise UnsupportedMediaType(
                f"A PATCH body is {OFFSET_TYPE}.",
                errors=[FieldError("header:content-type", f"must be {OFFSET_TYPE}")],
            )
        offset = _number(upload_offset, "Upload-Offset")
        row = await tus.receive(
            ingestion(ctx),
            parts_of(ctx),
            ctx.scratch,
            principal.account_id,
            principal.plan,
            upload_id,
            offset,
            _until_disconnect(request),
            declared=_declared(request),
        )
    except Exception as exc:
        raise _with_tus(exc) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT, headers=_state_headers(row))


@router.delete(
    f"{PATH}/{{upload_id}}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_ERRORS,
)
async def tus_delete(
    upload_id: str, principal: PrincipalDep, ctx: CtxDep, tus_resumable: TusResumable = None
) -> Response:
    """Drop the upload and what it received; the quota it held is free again. An asset it
    already became stays."""
    try:
        _check_version(tus_resumable)
        await tus.terminate(ingestion(ctx), parts_of(ctx), principal.account_id, upload_id)
    except Exception as exc:
        raise _with_tus(exc) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT, headers=TUS_HEADERS)


@router.get(f"{PATH}/{{upload_id}}", response_model=TusUploadOut, responses=_ERRORS)
async def tus_get(
    upload_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep
) -> TusUploadOut:
    """The upload as JSON: bytes received, and the asset it became (or the problem that
    refused it)."""
    account_id = principal.account_id
    row = await tus.get(ingestion(ctx), account_id, upload_id)
    asset = None
    if row.asset_id:
        found = await ctx.db.read(lambda c: asset_store.get(c, account_id, row.asset_id))
        asset = asset_out(request, ctx, found) if found is not None else None
    return TusUploadOut(
        id=row.id,
        name=row.name,
        length=row.length,
        offset=row.offset_bytes,
        expires_at=row.expires_at,
        asset_id=row.asset_id,
        asset=asset,
        problem=row.problem,
    )
