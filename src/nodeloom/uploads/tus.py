"""Resumable uploads (tus 1.0 core, creation, termination, expiration): the work behind
the routes of api/routes/tus.py, for any replica.

- ``create`` holds the declared length against the plan's file size (413) and the
  account's storage quota (402, one conditional statement: a race cannot pass it) and
  prepares where the bytes wait (uploads/tus_parts.py).
- ``receive`` takes the lease of the upload at the client's offset (409 otherwise),
  stores what the request brings, recording the offset as it goes (so a request cut
  off, or a replica that dies, loses at most what it had not stored yet), and when the
  last byte is there makes the file an asset through the same ingest as ``POST /uploads``
  (uploads/accept.py). The hold is given back in the transaction that counts the
  asset's own bytes.
- ``expire`` removes uploads past their expiry with their bytes and gives their hold
  back; each creation runs it for a few, and an expired upload reads as unknown anyway.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy.engine import Connection

from nodeloom.db.models import utcnow
from nodeloom.engine.scratch import ScratchSpace
from nodeloom.errors import (
    Conflict,
    FieldError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ProblemError,
)
from nodeloom.nodes.sniff import HEAD_BYTES
from nodeloom.store import Record
from nodeloom.store import tus_uploads as tus_store
from nodeloom.uploads.accept import Ingestion, accept, plan_limits, work_folder
from nodeloom.uploads.received import ReceivedFile
from nodeloom.uploads.tus_parts import Parts

LEASE_SECONDS = 30.0  # a request that stores nothing for this long loses the upload
RENEW_SECONDS = 10.0
INGEST_LEASE_SECONDS = 3600.0
EXPIRE_BATCH = 20
MAX_METADATA = 4096


def parse_metadata(header: str | None) -> dict[str, str]:
    """``Upload-Metadata``: comma-separated ``key base64value`` pairs (the value optional)."""
    if not header:
        return {}
    if len(header) > MAX_METADATA:
        raise InvalidRequest(f"Upload-Metadata is longer than {MAX_METADATA} characters.")
    pairs: dict[str, str] = {}
    for item in header.split(","):
        words = item.strip().split(" ")
        if not words[0] or len(words) > 2 or words[0] in pairs:
            raise InvalidRequest(
                "Upload-Metadata is comma-separated pairs of a key and a base64 value.",
                errors=[FieldError("header:upload-metadata", "malformed")],
            )
        value = ""
        if len(words) == 2:
            try:
                value = base64.b64decode(words[1], validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise InvalidRequest(
                    f"The Upload-Metadata value of {words[0]!r} is not base64 of UTF-8 text.",
                    errors=[FieldError("header:upload-metadata", "not base64 UTF-8")],
                ) from exc
        pairs[words[0]] = value
    return pairs


def _name(metadata: dict[str, str]) -> str | None:
    raw = metadata.get("filename") or metadata.get("name") or ""
    name = raw.replace("\\", "/").rsplit("/", 1)[-1].strip()[:255]
    return name or None


async def expire(services: Ingestion, parts: Parts, limit: int = EXPIRE_BATCH) -> int:
    """Remove up to ``limit`` expired uploads: their bytes, their rows, their holds."""
    rows = await services.db.read(lambda c: tus_store.expired(c, limit))
    for row in rows:
        if row.storage == parts.storage:
            await parts.discard(row)
        await services.db.write(_forgetting(str(row.id)))
    return len(rows)


def _forgetting(upload_id: str) -> Callable[[Connection], None]:
    return lambda c: tus_store.forget(c, upload_id)


async def create(
    services: Ingestion,
    parts: Parts,
    account_id: str,
    plan: str,
    length: int,
    metadata_header: str | None,
) -> Record:
    metadata = parse_metadata(metadata_header)
    limits = plan_limits(services.settings, plan)
    if length <= 0:
        raise InvalidRequest(
            "Upload-Length must be at least 1.",
            errors=[FieldError("header:upload-length", "an empty file")],
        )
    if length > limits.file_bytes:
        raise PayloadTooLarge(
            f"The file is larger than {limits.file_bytes} bytes, the most this account may "
            "upload at once.",
            extra={"limit": limits.file_bytes},
        )
    await expire(services, parts)
    expires_at = utcnow() + timedelta(seconds=services.settings.tus_expiry_seconds)
    row = await services.db.write(
        lambda c: tus_store.create(
            c,
            account_id,
            length=length,
            name=_name(metadata),
            metadata=metadata_header or None,
            storage=parts.storage,
            quota=limits.storage_bytes,
            expires_at=expires_at,
        )
    )
    try:
        multipart_id = await parts.start(row.id)
    except BaseException:
        await services.db.write(lambda c: tus_store.forget(c, row.id))
        raise
    if multipart_id is not None:
        await services.db.write(lambda c: tus_store.set_multipart(c, row.id, multipart_id))
    return row


async def get(services: Ingestion, account_id: str, upload_id: str) -> Record:
    row = await services.db.read(lambda c: tus_store.get(c, account_id, upload_id))
    if row is None:
        raise NotFound("No such upload.")
    return row


async def _claim(
    services: Ingestion, account_id: str, upload_id: str, offset: int, lease: str
) -> Record:
    claimed = await services.db.write(
        lambda c: tus_store.claim(c, account_id, upload_id, offset, lease, LEASE_SECONDS)
    )
    if claimed is not None:
        return claimed
    row = await get(services, account_id, upload_id)
    if row.asset_id is not None or row.problem is not None:
        raise Conflict("The upload is finished.", extra={"offset": row.offset_bytes})
    if row.offset_bytes != offset:
        raise Conflict(
            f"Upload-Offset is {offset}; the upload has {row.offset_bytes} bytes.",
            headers={"Upload-Offset": str(row.offset_bytes)},
            extra={"offset": row.offset_bytes},
        )
    raise Conflict(
        "Another request is writing this upload; try again shortly.",
        headers={"Retry-After": "2"},
        extra={"offset": row.offset_bytes},
    )


async def receive(
    services: Ingestion,
    parts: Parts,
    scratch: ScratchSpace,
    account_id: str,
    plan: str,
    upload_id: str,
    offset: int,
    chunks: AsyncIterator[bytes],
    declared: int | None = None,
) -> Record:
    """Store the bytes of one PATCH from ``offset``; the upload's row afterwards (with its
    asset once the last byte is in). ``chunks`` simply ends if the client goes away: what
    arrived is kept. ``declared``: the body's Content-Length, refused (413) before anything is
    stored if it goes past the upload's length."""
    lease = secrets.token_hex(16)
    row = await _claim(services, account_id, upload_id, offset, lease)
    if declared is not None and offset + declared > row.length:
        await services.db.write(lambda c: tus_store.unlock(c, upload_id, lease))
        raise PayloadTooLarge(
            f"The body goes past Upload-Length ({row.length} bytes).",
            headers={"Upload-Offset": str(offset)},
            extra={"limit": row.length - offset},
        )
    db = services.db
    writer = parts.open(row)
    stored_offset = row.offset_bytes
    received = row.offset_bytes
    too_long = False
    renewed = time.monotonic()

    async def store(final: bool) -> None:
        nonlocal stored_offset, renewed
        if not await db.write(lambda c: tus_store.renew(c, upload_id, lease, LEASE_SECONDS)):
            raise Conflict("Another request took this upload over; resume from its offset.")
        stored = await writer.flush(final)
        moved = await db.write(
            lambda c: tus_store.advance(
                c,
                upload_id,
                lease,
                LEASE_SECONDS,
                offset=stored.offset,
                parts=stored.parts,
                tail=stored.tail,
            )
        )
        if not moved:
            raise Conflict("Another request took this upload over; resume from its offset.")
        stored_offset, renewed = stored.offset, time.monotonic()

    try:
        async for chunk in chunks:
            room = row.length - received
            if len(chunk) > room:
                chunk, too_long = chunk[:room], True
            if chunk:
                await writer.add(chunk)
                received += len(chunk)
            if too_long:
                break
            if writer.due or time.monotonic() - renewed > RENEW_SECONDS:
                await store(final=False)
        await store(final=True)
        if too_long:
            await db.write(lambda c: tus_store.unlock(c, upload_id, lease))
            raise PayloadTooLarge(
                f"The body goes past Upload-Length ({row.length} bytes); the bytes up to it "
                "were kept.",
                headers={"Upload-Offset": str(stored_offset)},
            )
        if stored_offset < row.length:
            await db.write(lambda c: tus_store.unlock(c, upload_id, lease))
            return await get(services, account_id, upload_id)
        await writer.complete()
    except BaseException:
        writer.close()
        await asyncio.shield(db.write(lambda c: tus_store.unlock(c, upload_id, lease)))
        raise
    writer.close()
    digest = writer.digest()
    return await _ingest(services, parts, scratch, account_id, plan, row, lease, digest)


def _measure(path: Path, received: ReceivedFile, digest: str | None) -> None:
    """Size, head and sha256 of the assembled file (the digest read again only if the
    writer did not see every byte)."""
    with path.open("rb") as handle:
        received.head = handle.read(HEAD_BYTES)
        received.size = os.fstat(handle.fileno()).st_size
        if digest is None:
            hasher = hashlib.sha256(received.head)
            while chunk := handle.read(1 << 20):
                hasher.update(chunk)
            digest = hasher.hexdigest()
    received.sha256 = digest


async def _ingest(
    services: Ingestion,
    parts: Parts,
    scratch: ScratchSpace,
    account_id: str,
    plan: str,
    row: Record,
    lease: str,
    digest: str | None = None,
) -> Record:
    """The upload complete: made an asset as ``POST /uploads`` makes one, or refused."""
    db, upload_id = services.db, row.id
    await db.write(lambda c: tus_store.renew(c, upload_id, lease, INGEST_LEASE_SECONDS))
    try:
        async with work_folder(scratch) as work_dir:
            path = work_dir / f"tus-{upload_id}"
            await parts.assemble(row, path)
            received = ReceivedFile(path, "tus", row.name)
            await asyncio.to_thread(_measure, path, received, digest)
            accepted = await accept(
                services,
                account_id,
                plan,
                received,
                row.name or "upload",
                work_dir,
                before_create=lambda c: tus_store.release_held(c, upload_id),
            )
    except ProblemError as exc:
        problem: dict[str, object] = {"code": exc.code, "status": exc.status, "detail": exc.detail}
        await db.write(lambda c: tus_store.finish(c, upload_id, lease, problem=problem))
        await parts.discard(row)
        raise
    except BaseException:
        # Not the file's fault (a crash of ours, a cancelled request): the upload stays
        # complete and an empty PATCH at its end tries the ingest again.
        await asyncio.shield(db.write(lambda c: tus_store.unlock(c, upload_id, lease)))
        raise
    asset_id = accepted.asset.id
    await db.write(lambda c: tus_store.finish(c, upload_id, lease, asset_id=asset_id))
    await parts.discard(row)
    return await get(services, account_id, upload_id)


async def terminate(services: Ingestion, parts: Parts, account_id: str, upload_id: str) -> None:
    row = await services.db.write(lambda c: tus_store.delete(c, account_id, upload_id))
    if row is None:
        raise NotFound("No such upload.")
    if row.asset_id is None and row.storage == parts.storage:
        await parts.discard(row)
