"""Artifacts in S3-compatible object storage (AWS S3, MinIO, Ceph, R2, ...), for deployments
on several hosts: any worker reads what another wrote.

Objects are named ``<prefix>/ab/cd/<sha256>``, like the local store's files, so the same
output stored twice is one object. Nodes read inputs from local files: ``local_path``
downloads an object once into a bounded cache under the data directory
(``NODELOOM_ARTIFACT_CACHE_MB``), where files are named by their hash and so never stale.
Downloads through the API stream from the object store with the requested byte range.

The client is obstore (Rust, async, maintained by the Development Seed team): uploads of large
outputs go in parallel parts, and nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import obstore
from obstore.exceptions import NotFoundError
from obstore.store import S3Store

from nodeloom.artifacts.store import Referenced, StoredBlob, sha256_of_file
from nodeloom.settings import Settings

READ_CHUNK = 256 * 1024
_LIST_BATCH = 500


def s3_store(settings: Settings) -> S3Store:
    if not settings.s3_bucket:
        raise ValueError("NODELOOM_S3_BUCKET is required when NODELOOM_ARTIFACT_STORE=s3")
    config: dict[str, Any] = {"region": settings.s3_region}
    if settings.s3_endpoint_url:
        config["endpoint"] = settings.s3_endpoint_url
        config["virtual_hosted_style_request"] = False
    if settings.s3_access_key_id:
        config["access_key_id"] = settings.s3_access_key_id
    if settings.s3_secret_access_key is not None:
        config["secret_access_key"] = settings.s3_secret_access_key.get_secret_value()
    allow_http = bool(settings.s3_endpoint_url and settings.s3_endpoint_url.startswith("http:"))
    return S3Store(
        settings.s3_bucket,
        prefix=settings.s3_prefix or None,
        client_options={"allow_http": allow_http, "timeout": "300s"},
        **config,
    )


class S3ArtifactStore:
    def __init__(self, settings: Settings, store: S3Store | None = None) -> None:
        self.store = store or s3_store(settings)
        self.cache = settings.data_dir / "cache" / "artifacts"
        self.cache.mkdir(parents=True, exist_ok=True)
        self.cache_bytes = settings.artifact_cache_mb * 1024 * 1024
        self._downloads: dict[str, asyncio.Future[Path]] = {}

    @staticmethod
    def key(sha256: str) -> str:
        return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"

    async def put_bytes(self, data: bytes) -> StoredBlob:
        digest = hashlib.sha256(data).hexdigest()
        # Always written, even when present: a fresh Last-Modified tells retention that the
        # object is wanted again (see collect).
        await obstore.put_async(self.store, self.key(digest), data)
        return StoredBlob(digest, len(data))

    async def put_file(self, path: Path) -> StoredBlob:
        digest, size = await asyncio.to_thread(sha256_of_file, path)
        try:
            await obstore.put_async(self.store, self.key(digest), path)
        finally:
            await asyncio.to_thread(os.unlink, path)
        return StoredBlob(digest, size)

    async def exists(self, sha256: str) -> bool:
        try:
            await obstore.head_async(self.store, self.key(sha256))
        except FileNotFoundError:
            return False
        except NotFoundError:
            return False
        return True

    async def local_path(self, sha256: str) -> Path:
        """The object as a local file: a cached copy, downloaded once per process even when
        several nodes ask at the same time."""
        target = self.cache / sha256
        if target.is_file():
            with contextlib.suppress(FileNotFoundError):
                os.utime(target)  # recently used: evicted last
            return target
        pending = self._downloads.get(sha256)
        if pending is None:
            pending = asyncio.ensure_future(self._download(sha256, target))
            self._downloads[sha256] = pending
            pending.add_done_callback(lambda _: self._downloads.pop(sha256, None))
        return await asyncio.shield(pending)

    async def _download(self, sha256: str, target: Path) -> Path:
        tmp = self.cache / f".tmp-{uuid.uuid4().hex}"
        result = await obstore.get_async(self.store, self.key(sha256))
        try:
            with tmp.open("wb") as handle:
                async for chunk in result.stream(min_chunk_size=1 << 20):
                    handle.write(chunk)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        await asyncio.to_thread(self._evict)
        return target

    def _evict(self) -> None:
        """Keep the cache under its size: least recently used files go first."""
        entries = []
        total = 0
        for path in self.cache.iterdir():
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                entries.append((stat.st_mtime, stat.st_size, path))
                total += stat.st_size
        entries.sort()
        for _, size, path in entries:
            if total <= self.cache_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size

    async def read(self, sha256: str, first: int, length: int) -> AsyncIterator[bytes]:
        if length <= 0:
            return
        options: Any = {"range": (first, first + length)}
        result = await obstore.get_async(self.store, self.key(sha256), options=options)
        async for chunk in result.stream(min_chunk_size=READ_CHUNK):
            yield chunk

    async def collect(self, older_than: float, referenced: Referenced) -> tuple[int, int]:
        """Objects unreferenced and unwritten since ``older_than`` go. Each is checked once
        more (its Last-Modified, and the database) just before it is deleted; a node writing
        the same bytes in the milliseconds between that check and the deletion would lose
        its object — the one window object storage leaves open (it has no rename to set an
        object aside), documented in docs/operations.md."""
        removed = freed = 0
        async for batch in obstore.list(self.store, chunk_size=_LIST_BATCH):
            old = {
                meta["path"].rsplit("/", 1)[-1]: meta
                for meta in batch
                if meta["last_modified"].timestamp() < older_than
            }
            if not old:
                continue
            used = await referenced(list(old))
            for sha, meta in old.items():
                if sha in used:
                    continue
                try:
                    fresh = await obstore.head_async(self.store, self.key(sha))
                except (FileNotFoundError, NotFoundError):
                    continue
                if fresh["last_modified"].timestamp() >= older_than or await referenced([sha]):
                    continue
                await obstore.delete_async(self.store, self.key(sha))
                removed += 1
                freed += int(meta["size"])
        return removed, freed

    async def ready(self) -> bool:
        try:
            await obstore.list_with_delimiter_async(self.store)
        except Exception:
            return False
        return True


async def upload_tree(store: S3ArtifactStore, root: Path) -> AsyncIterator[tuple[str, int]]:
    """Upload every artifact file under a local store's ``root`` (kept where it is): yields
    (sha256, bytes) as each one is stored."""
    for directory, _, names in os.walk(root):
        for name in names:
            if len(name) != 64 or name.startswith("."):
                continue
            path = Path(directory) / name
            await obstore.put_async(store.store, store.key(name), path)
            yield name, path.stat().st_size
