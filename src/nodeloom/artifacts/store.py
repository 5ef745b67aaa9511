"""Where artifact bytes live. Content-addressed by sha256, so the same output stored twice
takes the space once, and a file is complete before any row points at it.

``ArtifactStore`` is what the engine, the download route and retention use; two stores
implement it: ``LocalArtifactStore`` (files under the data directory, the embedded default)
and ``S3ArtifactStore`` (artifacts/s3.py, any S3-compatible object storage, for several
hosts). Nodes read their inputs from local files, so a store hands out ``local_path``: the
file itself here, a cached download there.

The local store keeps ``<data_dir>/artifacts/ab/cd/<sha256>``. A file is written to a
temporary name in the same directory and renamed into place (atomic on POSIX), so a crash
never leaves a half file under a real name.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CHUNK = 1024 * 1024
INLINE_WRITE_LIMIT = 64 * 1024  # smaller outputs are written without a thread hop
READ_CHUNK = 256 * 1024

# Whether stored blobs are still wanted: the database answers for a batch of sha256s.
Referenced = Callable[[list[str]], Awaitable[set[str]]]


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size_bytes: int


class ArtifactStore(Protocol):
    async def put_bytes(self, data: bytes) -> StoredBlob:
        """Store ``data``."""

    async def put_file(self, path: Path) -> StoredBlob:
        """Store the file at ``path``, which the store takes over (moves or deletes)."""

    async def local_path(self, sha256: str) -> Path:
        """A readable local file with the blob's bytes, for a node's input."""

    async def exists(self, sha256: str) -> bool: ...

    def read(self, sha256: str, first: int, length: int) -> AsyncIterator[bytes]:
        """``length`` bytes from offset ``first``, in chunks (downloads, Range)."""

    async def collect(self, older_than: float, referenced: Referenced) -> tuple[int, int]:
        """Remove blobs unchanged since ``older_than`` (epoch seconds) that ``referenced``
        does not claim; (blobs removed, bytes freed). See engine/retention.py."""


def sha256_of_file(path: Path) -> tuple[str, int]:
    hasher = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
            size += len(chunk)
    return hasher.hexdigest(), size


class LocalArtifactStore:
    """Files on local disk. ``fsync`` follows the database's durability: with SQLite
    ``synchronous=FULL`` a file is flushed to disk before its row can commit."""

    def __init__(self, root: Path, fsync: bool = False) -> None:
        self.root = root
        self.fsync = fsync
        root.mkdir(parents=True, exist_ok=True)
        # Directories known to exist: a mkdir per write costs more than the write itself.
        self._dirs: set[Path] = set()

    def path_for(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:4] / sha256

    # -- the ArtifactStore interface ---------------------------------------------------------

    async def put_bytes(self, data: bytes) -> StoredBlob:
        if len(data) <= INLINE_WRITE_LIMIT:
            return self.put_bytes_now(data)
        return await asyncio.to_thread(self.put_bytes_now, data)

    async def put_file(self, path: Path) -> StoredBlob:
        return await asyncio.to_thread(self.put_file_now, path)

    async def local_path(self, sha256: str) -> Path:
        return self.path_for(sha256)

    async def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    async def read(self, sha256: str, first: int, length: int) -> AsyncIterator[bytes]:
        import anyio

        async with await anyio.open_file(self.path_for(sha256), "rb") as handle:
            await handle.seek(first)
            remaining = length
            while remaining > 0:
                chunk = await handle.read(min(READ_CHUNK, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                yield chunk

    async def collect(self, older_than: float, referenced: Referenced) -> tuple[int, int]:
        """A file is removed by renaming it aside, checking that it was not touched
        meanwhile (``_reuse`` touches a file a node produces again) and that still no row
        references it, and only then unlinking it; else it is renamed back. A node that finds
        the file gone writes it anew, so one producing the same bytes during a pass keeps
        them."""
        candidates = await asyncio.to_thread(lambda: list(self._old_files(older_than)))
        if not candidates:
            return 0, 0
        used = await referenced([sha for sha, _, _ in candidates])
        removed = freed = 0
        for sha, path, size in candidates:
            if sha in used:
                continue
            aside = path.with_name(f".gc-{sha}")
            try:
                path.rename(aside)
                touched = aside.stat().st_mtime >= older_than
            except FileNotFoundError:
                continue
            if touched or await referenced([sha]):
                aside.rename(path)
                continue
            aside.unlink(missing_ok=True)
            removed += 1
            freed += size
        return removed, freed

    # -- synchronous work (threads) ----------------------------------------------------------

    def _ensure_dir(self, path: Path) -> None:
        if path not in self._dirs:
            path.mkdir(parents=True, exist_ok=True)
            self._dirs.add(path)

    @staticmethod
    def _reuse(target: Path) -> bool:
        """Whether ``target`` is there to be reused; touching it tells retention (which
        removes only files untouched for an hour) that it is wanted again."""
        try:
            os.utime(target)
        except FileNotFoundError:
            return False
        return True

    def put_bytes_now(self, data: bytes) -> StoredBlob:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_for(digest)
        if not self._reuse(target):
            self._write_atomically(target, data)
        return StoredBlob(digest, len(data))

    def put_file_now(self, path: Path) -> StoredBlob:
        digest, size = sha256_of_file(path)
        target = self.path_for(digest)
        if self._reuse(target):
            path.unlink(missing_ok=True)
            return StoredBlob(digest, size)
        self._ensure_dir(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        os.close(fd)
        try:
            shutil.move(str(path), tmp)
            if self.fsync:
                with open(tmp, "rb+") as handle:
                    os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return StoredBlob(digest, size)

    def _write_atomically(self, target: Path, data: bytes) -> None:
        self._ensure_dir(target.parent)
        tmp = target.parent / f".tmp-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self.fsync:
                os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(tmp, target)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            tmp.unlink(missing_ok=True)
            raise

    def _old_files(self, older_than: float) -> Iterator[tuple[str, Path, int]]:
        """(sha256, path, size) of stored files last written before ``older_than``; leftover
        temporary files of interrupted writes are removed on the way."""
        for directory, _, names in os.walk(self.root):
            for name in names:
                path = Path(directory) / name
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                if stat.st_mtime >= older_than:
                    continue
                if name.startswith(".tmp-"):
                    path.unlink(missing_ok=True)
                elif len(name) == 64 and not name.startswith("."):
                    yield name, path, stat.st_size
