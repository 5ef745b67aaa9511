"""A received file made into an asset of the account: sniffed, decoded and converted in the
sandbox, stored, and counted against the account's storage quota.

1. The same bytes uploaded before by the account answer the asset made of them at once
   (no decode).
2. ``sniff`` looks at the first bytes; what we never take is refused there.
3. The sandbox decodes the file for real under the budget of its kind and the account's
   limits (pixels, length), and converts it when needed (nodes/ingest.py).
4. The result (and its thumbnail) go to the artifact store; the asset row and the quota
   change commit together. Stored content the account already holds answers that asset
   (deduplicated by sha256), costing no quota.

Blobs are stored before their row commits, as node outputs are: one left by a refused
quota or a lost race is unreferenced, and retention removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from nodeloom import budget as budgets
from nodeloom.artifacts.store import ArtifactStore
from nodeloom.db.engine import Database
from nodeloom.engine.scratch import ScratchSpace
from nodeloom.errors import (
    MediaLimitExceeded,
    MediaUnreadable,
    ProblemError,
    ServiceUnavailable,
    UnsupportedMedia,
)
from nodeloom.nodes import ingest
from nodeloom.nodes.sniff import Refused, sniff
from nodeloom.sandbox.pool import SandboxPool
from nodeloom.sandbox.zygote import SandboxUnavailable
from nodeloom.sdk._node import NodeFailure
from nodeloom.settings import Settings
from nodeloom.store import Record
from nodeloom.store import assets as asset_store
from nodeloom.uploads.limits import UploadLimits, resolve
from nodeloom.uploads.received import ReceivedFile

INGEST_TYPE = "Ingest"  # the budget's "node type", for NODELOOM_NODE_BUDGETS overrides


def plan_limits(settings: Settings, plan: str) -> UploadLimits:
    return resolve(
        plan,
        settings.upload_limits,
        max_image_pixels=settings.max_image_pixels,
        max_media_seconds=settings.max_media_seconds,
    )


@dataclass(frozen=True)
class Ingestion:
    """What accepting a file needs of the server."""

    settings: Settings
    db: Database
    store: ArtifactStore
    sandbox: SandboxPool


@dataclass(frozen=True)
class Accepted:
    asset: Record
    created: bool  # False: the account already had an asset of this content


_FAILURES: dict[str, type[ProblemError]] = {
    ingest.UNSUPPORTED: UnsupportedMedia,
    ingest.TOO_LARGE: MediaLimitExceeded,
    "node_memory_limit": MediaLimitExceeded,
    "node_timeout": MediaLimitExceeded,
}


def _problem(exc: NodeFailure) -> ProblemError:
    return _FAILURES.get(exc.code, MediaUnreadable)(exc.message)


async def accept(
    services: Ingestion,
    account_id: str,
    plan: str,
    received: ReceivedFile,
    name: str,
    work_dir: Path,
    before_create: Callable[[Connection], None] | None = None,
) -> Accepted:
    """The asset of ``received``, a file in ``work_dir`` (where the ingest writes too; the
    caller removes it, ``work_folder``). ``before_create`` runs in the transaction that
    creates the asset, before its bytes are counted: a resumable upload gives back the
    bytes it held there, so the asset may take them (uploads/tus.py)."""
    settings, db = services.settings, services.db
    same = await db.read(lambda c: asset_store.by_source(c, account_id, received.sha256))
    if same is not None:
        return Accepted(same, created=False)
    try:
        sniffed = sniff(received.head)
    except Refused as exc:
        raise UnsupportedMedia(f"Refused: {exc}.") from exc
    limits = plan_limits(settings, plan)
    budget = budgets.resolve(
        INGEST_TYPE,
        sniffed.kind,
        plan,
        overrides=settings.node_budgets,
        plan_caps=settings.plan_budgets,
        timeout_seconds=settings.node_timeout_seconds,
    )
    narrowed = {"max_image_pixels": limits.pixels, "max_media_seconds": limits.seconds}
    try:
        reply = await services.sandbox.ingest(
            received.path, (sniffed.kind, sniffed.format), work_dir, narrowed, budget, account_id
        )
    except NodeFailure as exc:
        raise _problem(exc) from exc
    except SandboxUnavailable as exc:
        raise ServiceUnavailable(
            "The server cannot decode files just now.", headers={"Retry-After": "5"}
        ) from exc
    output = _own_file(Path(str(reply["path"])), work_dir)
    blob = await services.store.put_file(output)
    thumb = None
    if reply.get("thumbnail"):
        thumb = await services.store.put_file(_own_file(Path(str(reply["thumbnail"])), work_dir))
    new = asset_store.NewAsset(
        name=name,
        kind=str(reply["kind"]),
        content_type=str(reply["content_type"]),
        size_bytes=blob.size_bytes,
        sha256=blob.sha256,
        source_sha256=received.sha256,
        source_format=sniffed.format,
        width=_int(reply.get("width")),
        height=_int(reply.get("height")),
        duration_ms=_int(reply.get("duration_ms")),
        video_codec=_text(reply.get("video_codec")),
        audio_codec=_text(reply.get("audio_codec")),
        thumbnail_sha256=thumb.sha256 if thumb else None,
        thumbnail_bytes=thumb.size_bytes if thumb else None,
    )
    try:

        def create(conn: Connection) -> Record:
            if before_create is not None:
                before_create(conn)
            return asset_store.create(conn, account_id, new, limits.storage_bytes)

        row = await db.write(create)
    except IntegrityError:
        existing = await db.read(lambda c: asset_store.by_content(c, account_id, blob.sha256))
        if existing is None:
            raise
        return Accepted(existing, created=False)
    return Accepted(row, created=True)


@contextlib.asynccontextmanager
async def work_folder(scratch: ScratchSpace) -> AsyncIterator[Path]:
    """A folder of the process's scratch space for receiving and decoding files, removed
    afterwards (and by the next start if the process dies meanwhile)."""
    path = scratch.node_dir()
    path.mkdir(mode=0o700, parents=True)
    try:
        yield path
    finally:
        await asyncio.to_thread(shutil.rmtree, path, True)


def _own_file(path: Path, work_dir: Path) -> Path:
    """A file the sandbox named: it must be one of this upload's own."""
    if not path.resolve().is_relative_to(work_dir.resolve()):
        raise NodeFailure("the ingest named a file outside its folder", "internal_error")
    return path


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _text(value: object) -> str | None:
    return str(value)[:32] if value else None
