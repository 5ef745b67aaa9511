"""Artifact downloads, served like a CDN: ETag, If-None-Match, Range, signed URLs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.engine import Connection
from starlette.responses import StreamingResponse

from nodeloom.api.deps import CtxDep, PrincipalDep, bearer, get_principal
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.urls import public_base
from nodeloom.artifacts.store import ArtifactStore
from nodeloom.auth.tokens import check_signed_url, sign_url
from nodeloom.errors import NotFound, RangeNotSatisfiable, Unauthorized
from nodeloom.nodes.registry import Registry
from nodeloom.schemas.runs import ArtifactMetadata
from nodeloom.store import Record
from nodeloom.store import artifacts as artifact_store

router = APIRouter(route_class=GuardedRoute, tags=["artifacts"])

CHUNK = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
CACHE_CONTROL = "private, max-age=31536000, immutable"  # content-addressed: never changes
# A download opened directly is a document of its own on our origin. Sandboxed (no scripts,
# an opaque origin), it can show an image or play a medium and nothing else; inline styles
# are allowed because browsers style their own image and media viewers with them.
ARTIFACT_CSP = (
    "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'"
)
TEXT_TYPE = "text/plain; charset=utf-8"
INLINE_TYPES = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/webp": "webp",
    "image/gif": "gif",
    "audio/mpeg": "mp3",
    "audio/wav": "wav",
    "audio/ogg": "ogg",
    "video/mp4": "mp4",
    "video/webm": "webm",
}


def _download_path(artifact_id: str) -> str:
    return f"/api/v1/artifacts/{artifact_id}"


def served_as(artifact_id: str, stored_type: str) -> tuple[str, str]:
    """(Content-Type, Content-Disposition) of a download.

    Media a browser shows by itself (the types nodes produce) are served inline as they
    are; any text as ``text/plain; charset=utf-8``, so a text that happens to hold markup is
    never a page of ours; anything else as an ``application/octet-stream`` attachment. The
    name is the artifact's id with the type's extension, for "Save as" and downloads."""
    if stored_type.startswith("text/"):
        return TEXT_TYPE, f'inline; filename="{artifact_id}.txt"'
    extension = INLINE_TYPES.get(stored_type)
    if extension is None:
        return "application/octet-stream", f'attachment; filename="{artifact_id}"'
    return stored_type, f'inline; filename="{artifact_id}.{extension}"'


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive for one satisfiable byte range; None to send everything.
    Raises RangeNotSatisfiable for a range outside the file."""
    match = _RANGE.match(header.strip())
    if match is None:
        return None  # multiple or malformed ranges: RFC 9110 lets us ignore Range
    first_s, last_s = match.groups()
    if not first_s and not last_s:
        return None
    if not first_s:
        length = int(last_s)
        if length == 0:
            raise RangeNotSatisfiable(f"Range {header} selects nothing of {size} bytes.")
        return max(0, size - length), size - 1
    first = int(first_s)
    last = min(int(last_s), size - 1) if last_s else size - 1
    if first >= size or (last_s and int(last_s) < first):
        raise RangeNotSatisfiable(
            f"Range {header} is outside the {size} bytes of this artifact.",
        )
    return first, last


async def owned_or_signed(
    request: Request,
    ctx: CtxDep,
    path: str,
    credentials: HTTPAuthorizationCredentials | None,
    exp: str | None,
    sig: str | None,
    *,
    by_id: Callable[[Connection], Record | None],
    owned: Callable[[Connection, str], Record | None],
) -> Record | None:
    """The row a download of ``path`` serves: ``by_id`` when the URL carries a valid
    signature (its own authorisation), else ``owned`` by the caller's account."""
    if sig is not None or exp is not None:
        if not check_signed_url(ctx.settings.secret, path, exp or "", sig or ""):
            # A signed URL is a credential: a wrong or expired one is 401, as a bad key is.
            raise Unauthorized("The signature is invalid or has expired.")
        return await ctx.db.read(by_id)
    principal = await get_principal(request, ctx, credentials)
    account_id = principal.account_id
    return await ctx.db.read(lambda c: owned(c, account_id))


@router.get(
    "/artifacts/{artifact_id}",
    response_class=Response,
    responses={
        200: {
            "description": "The file",
            "content": {
                "image/png": {},
                "video/mp4": {},
                "audio/mpeg": {},
                "text/plain": {},
            },
        },
        206: {"description": "Partial content (Range)"},
        304: {"description": "Not modified (If-None-Match)"},
        401: {"description": "No credential, or a bad or expired signature"},
        416: {"description": "Range not satisfiable"},
    },
)
async def download(
    artifact_id: str,
    request: Request,
    ctx: CtxDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    exp: Annotated[str | None, Query(max_length=20, description="Signed URL expiry")] = None,
    sig: Annotated[str | None, Query(max_length=128, description="Signed URL signature")] = None,
) -> Response:
    """The file. Authorised by the owner's credentials or a signed ``?exp=&sig=`` URL."""
    row = await owned_or_signed(
        request,
        ctx,
        _download_path(artifact_id),
        credentials,
        exp,
        sig,
        by_id=lambda c: artifact_store.any_account(c, artifact_id),
        owned=lambda c, account: artifact_store.owned(c, account, artifact_id),
    )
    if row is None:
        raise NotFound("No such artifact.")
    return blob_response(
        request,
        ctx.store,
        name=row.id,
        sha256=row.sha256,
        size=row.size_bytes,
        stored_type=row.content_type,
        data=row.data,
    )


def blob_response(
    request: Request,
    store: ArtifactStore,
    *,
    name: str,
    sha256: str,
    size: int,
    stored_type: str,
    data: bytes | None = None,
) -> Response:
    """A stored blob sent as a download (artifacts, assets): ETag and If-None-Match,
    Range, the sandboxing headers. ``data``: the bytes themselves, when kept in a row."""
    etag = f'"{sha256}"'
    content_type, disposition = served_as(name, stored_type)
    headers = {
        "ETag": etag,
        "Accept-Ranges": "bytes",
        "Cache-Control": CACHE_CONTROL,
        "Content-Security-Policy": ARTIFACT_CSP,
        "X-Content-Type-Options": "nosniff",
        "Content-Disposition": disposition,
    }
    if_none_match = request.headers.get("if-none-match")
    if if_none_match and (
        if_none_match.strip() == "*" or etag in [t.strip() for t in if_none_match.split(",")]
    ):
        return Response(status_code=304, headers=headers)
    span = None
    range_header = request.headers.get("range")
    if range_header is not None:
        if_range = request.headers.get("if-range")
        if if_range is None or if_range.strip() == etag:
            try:
                span = parse_range(range_header, size)
            except RangeNotSatisfiable as exc:
                exc.headers["Content-Range"] = f"bytes */{size}"
                raise
    first, last = span if span is not None else (0, size - 1)
    length = last - first + 1
    status = 200
    if span is not None:
        status = 206
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    if data is not None:  # a small text artifact, kept in its row
        return Response(
            data[first : last + 1], status_code=status, headers=headers, media_type=content_type
        )
    headers["Content-Length"] = str(length)
    return StreamingResponse(
        store.read(sha256, first, length),
        status_code=status,
        headers=headers,
        media_type=content_type,
    )


@router.get("/artifacts/{artifact_id}/metadata", response_model=ArtifactMetadata)
async def metadata(
    artifact_id: str, request: Request, principal: PrincipalDep, ctx: CtxDep
) -> ArtifactMetadata:
    """What the artifact is, with a signed ``download_url`` that needs no Authorization."""
    row = await ctx.db.read(
        lambda c: artifact_store.owned_with_producer(c, principal.account_id, artifact_id)
    )
    if row is None:
        raise NotFound("No such artifact.")
    settings = ctx.settings
    path = _download_path(row.id)
    query = sign_url(settings.secret, path, settings.signed_url_ttl_seconds)
    return ArtifactMetadata(
        id=row.id,
        run_id=row.run_id,
        workflow_id=row.workflow_id,
        node_id=row.node_id,
        content_type=row.content_type,
        size_bytes=row.size_bytes,
        sha256=row.sha256,
        created_at=row.created_at,
        download_url=f"{public_base(settings.base_url, request.scope)}{path}?{query}",
        width=row.width,
        height=row.height,
        duration_ms=row.duration_ms,
        kind=_kind(row, ctx.registry),
    )


_KIND_OF_CONTENT = {"image/png": "image", "audio/mpeg": "audio", "video/mp4": "video"}


def _kind(row: Record, registry: Registry) -> str:
    """What the artifact holds, as the catalog names kinds: a failed node's artifact is
    its error (json); otherwise its node type's output kind (json for ParseJson, ...), or
    what its content type says when the type is not known here or its params chose the
    kind (an HttpRequest answering an image: its content type is not its type's)."""
    if row.producer_status == "failed":
        return "json"
    node = registry.get(row.producer_type) if row.producer_type else None
    if (
        node is not None
        and not node.dynamic_interface
        and row.content_type == node.spec.output.content_type
    ):
        return str(node.spec.output.kind.value)
    return _KIND_OF_CONTENT.get(row.content_type, "text")
