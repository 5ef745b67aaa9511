"""Resumable uploads with tus 1.0 (``/api/v1/uploads/tus``), for large files: after a lost
connection or a busy server the client asks how many bytes arrived (HEAD) and sends the
rest from there, on whichever replica answers.

Our own few requests rather than a tus library: the Python ones are built on requests or
aiohttp, and this client speaks httpx with its own credentials, retries and errors.
"""

from __future__ import annotations

import asyncio
import base64
import functools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import anyio

from nodeloom.client._session import Session
from nodeloom.client.errors import APIError, ConnectionFailed, error_for

RESUMABLE_ABOVE = 8 * 1024 * 1024  # larger files go in resumable uploads
CHUNK = 1024 * 1024
ATTEMPTS = 8  # failures in a row before giving up
TUS = {"Tus-Resumable": "1.0.0"}
API = "/api/v1"


def _retryable(exc: Exception) -> bool:
    """A lost connection, a request another took over (409) or a server error."""
    if isinstance(exc, ConnectionFailed):
        return True
    return isinstance(exc, APIError) and (exc.http_status == 409 or exc.http_status >= 500)


async def upload_resumable(
    client: Session,
    source: Path,
    name: str,
    on_progress: Callable[[int], None] | None = None,
) -> str:
    """Upload ``source`` with tus; the id of the asset it became."""
    size = (await anyio.Path(source).stat()).st_size
    metadata = f"filename {base64.b64encode(name.encode()).decode()}"
    created = await client.request(
        "POST",
        "/uploads/tus",
        headers={**TUS, "Upload-Length": str(size), "Upload-Metadata": metadata},
    )
    path = urlsplit(created.headers["location"]).path.removeprefix(API)
    offset, failures = 0, 0
    while True:
        try:
            response = await client.request(
                "PATCH",
                path,
                content=functools.partial(_read_from, source, offset, on_progress),
                headers={
                    **TUS,
                    "Upload-Offset": str(offset),
                    "Content-Type": "application/offset+octet-stream",
                },
            )
        except Exception as exc:
            if not _retryable(exc):
                raise
            failures += 1
            if failures >= ATTEMPTS:
                raise
            await asyncio.sleep(min(0.5 * 2**failures, 8.0))
            offset, asset_id = await _where(client, path)
            if asset_id:
                return asset_id
            continue
        asset_id = response.headers.get("nodeloom-asset-id")
        if asset_id:
            return str(asset_id)
        offset, failures = int(response.headers["upload-offset"]), 0


async def _where(client: Session, path: str) -> tuple[int, str | None]:
    """The bytes the server has, and the asset if it is made; the upload's problem if the
    complete file was refused."""
    response = await client.request("HEAD", path, headers=TUS)
    if response.headers.get("nodeloom-upload-problem"):
        problem = (await client.request("GET", path)).json().get("problem") or {}
        raise error_for(int(problem.get("status") or 422), problem)
    return int(response.headers["upload-offset"]), response.headers.get("nodeloom-asset-id")


async def _read_from(
    source: Path, start: int, on_progress: Callable[[int], None] | None
) -> AsyncIterator[bytes]:
    sent = start
    if on_progress is not None:
        on_progress(sent)
    async with await anyio.open_file(source, "rb") as handle:
        await handle.seek(start)
        while chunk := await handle.read(CHUNK):
            yield chunk
            sent += len(chunk)
            if on_progress is not None:
                on_progress(sent)
