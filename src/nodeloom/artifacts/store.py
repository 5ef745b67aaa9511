"""Where artifact bytes live. Content-addressed by sha256, so the same output stored twice
takes the space once, and a file is complete before any row points at it.

The embedded default keeps files under ``<data_dir>/artifacts/ab/cd/<sha256>``. A file is
written to a temporary name in the same directory and renamed into place (atomic on POSIX),
so a crash never leaves a half file under a real name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CHUNK = 1024 * 1024


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size_bytes: int


class ArtifactStore(Protocol):
    def put_bytes(self, data: bytes) -> StoredBlob: ...

    def put_file(self, path: Path) -> StoredBlob: ...

    def path_for(self, sha256: str) -> Path: ...

    def exists(self, sha256: str) -> bool: ...


class LocalArtifactStore:
    """Files on local disk. ``fsync`` follows the database's durability: with SQLite
    ``synchronous=FULL`` a file is flushed to disk before its row can commit."""

    def __init__(self, root: Path, fsync: bool = False) -> None:
        self.root = root
        self.fsync = fsync
        root.mkdir(parents=True, exist_ok=True)
        # Directories known to exist: a mkdir per write costs more than the write itself.
        self._dirs: set[Path] = set()

    def _ensure_dir(self, path: Path) -> None:
        if path not in self._dirs:
            path.mkdir(parents=True, exist_ok=True)
            self._dirs.add(path)

    def path_for(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def put_bytes(self, data: bytes) -> StoredBlob:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_for(digest)
        if not target.exists():
            self._write_atomically(target, data)
        return StoredBlob(digest, len(data))

    def put_file(self, path: Path) -> StoredBlob:
        hasher = hashlib.sha256()
        size = 0
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                hasher.update(chunk)
                size += len(chunk)
        digest = hasher.hexdigest()
        target = self.path_for(digest)
        if target.exists():
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
