"""Where the bytes of a resumable upload wait until the last one arrives (uploads/tus.py).

- ``FileParts`` (the embedded store): one part file per upload under
  ``<data_dir>/uploads``, written at the stored offset. Replicas that share the data
  directory share these files. Bytes past the stored offset (written by a request that
  died before it recorded them) are cut off when the next request opens the file.
- ``S3Parts`` (the S3 store): an S3 multipart upload (artifacts/s3_multipart.py) whose id
  and part ETags are in the upload's row. S3 wants every part but the last to be at least
  5 MiB, so parts are ``PART_BYTES`` long; what a request leaves over (less than a part) is
  kept in the row's ``tail`` with the offset it completes, and the next request (on any
  replica) starts from it.

A writer gathers what a request sends and ``flush`` stores it: it answers the offset now
durable, with the row's new parts and tail.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nodeloom.artifacts.s3_multipart import MultipartClient
from nodeloom.store import Record

FILE_WRITE_BYTES = 1024 * 1024
FILE_RECORD_BYTES = 64 * 1024 * 1024
PART_BYTES = 5 * 1024 * 1024  # S3's smallest part but the last


@dataclass(frozen=True)
class Stored:
    offset: int
    parts: list[str]
    tail: bytes | None


class Writer(Protocol):
    async def add(self, data: bytes) -> None: ...

    @property
    def due(self) -> bool:
        """Enough is gathered to be worth storing now."""

    async def flush(self, final: bool) -> Stored:
        """Store what was gathered (``final``: the request is over, keep everything)."""

    async def complete(self) -> None:
        """All bytes are stored: make them one object."""

    def digest(self) -> str | None:
        """The sha256 of the whole upload, if this writer saw all of it."""

    def close(self) -> None: ...


class Parts(Protocol):
    storage: str

    async def start(self, upload_id: str) -> str | None:
        """Prepare a new upload's place; the multipart id, if the store has one."""

    def open(self, row: Record) -> Writer: ...

    async def assemble(self, row: Record, target: Path) -> None:
        """The whole upload as the local file ``target``; its own place stays until
        ``discard``, so an ingest cut short can be tried again."""

    async def discard(self, row: Record) -> None:
        """Remove whatever the upload stored."""


class _FileWriter:
    """Writes what arrives every ``FILE_WRITE_BYTES`` (off the loop), but asks to be stored
    (fsync, offset recorded) only every ``FILE_RECORD_BYTES``: a replica that dies loses at
    most that much of a request, and a 1 GB PATCH costs a few dozen database writes."""

    def __init__(self, path: Path, offset: int, fsync: bool) -> None:
        self.fd = os.open(path, os.O_WRONLY)
        os.ftruncate(self.fd, offset)
        self.offset = offset  # bytes written to the file
        self.unrecorded = 0
        self.fsync = fsync
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        # A file sent whole in one request is hashed as it is written, not read again.
        self.hasher = hashlib.sha256() if offset == 0 else None

    async def add(self, data: bytes) -> None:
        self.pending.append(data)
        self.pending_bytes += len(data)
        if self.pending_bytes >= FILE_WRITE_BYTES:
            await self._write_pending()

    @property
    def due(self) -> bool:
        return self.unrecorded >= FILE_RECORD_BYTES

    def _write(self, chunks: list[bytes], at: int) -> None:
        for chunk in chunks:
            if self.hasher is not None:
                self.hasher.update(chunk)
            view = memoryview(chunk)
            while view:
                written = os.pwrite(self.fd, view, at)
                view, at = view[written:], at + written

    async def _write_pending(self) -> None:
        if self.pending:
            chunks, size = self.pending, self.pending_bytes
            self.pending, self.pending_bytes = [], 0
            await asyncio.to_thread(self._write, chunks, self.offset)
            self.offset += size
            self.unrecorded += size

    async def flush(self, final: bool) -> Stored:
        await self._write_pending()
        if self.fsync and self.unrecorded:
            await asyncio.to_thread(os.fsync, self.fd)
        self.unrecorded = 0
        return Stored(self.offset, [], None)

    async def complete(self) -> None:
        return None

    def digest(self) -> str | None:
        return self.hasher.hexdigest() if self.hasher is not None else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class FileParts:
    storage = "file"

    def __init__(self, root: Path, fsync: bool = False) -> None:
        self.root = root
        self.fsync = fsync
        root.mkdir(parents=True, exist_ok=True)

    def path(self, upload_id: str) -> Path:
        return self.root / upload_id

    async def start(self, upload_id: str) -> str | None:
        self.path(upload_id).touch(mode=0o600)
        return None

    def open(self, row: Record) -> Writer:
        return _FileWriter(self.path(row.id), row.offset_bytes, self.fsync)

    async def assemble(self, row: Record, target: Path) -> None:
        await asyncio.to_thread(_link_or_copy, self.path(row.id), target)

    async def discard(self, row: Record) -> None:
        self.path(row.id).unlink(missing_ok=True)


class _S3Writer:
    def __init__(self, client: MultipartClient, row: Record) -> None:
        self.client = client
        self.name = S3Parts.object_name(row.id)
        self.multipart_id = str(row.multipart_id)
        self.parts = list(row.parts or [])
        self.buffer = bytearray(row.tail or b"")

    async def add(self, data: bytes) -> None:
        self.buffer += data

    @property
    def due(self) -> bool:
        return len(self.buffer) >= PART_BYTES

    async def _part(self, data: bytes) -> None:
        number = len(self.parts) + 1
        etag = await self.client.upload_part(self.name, self.multipart_id, number, data)
        self.parts.append(etag)

    async def flush(self, final: bool) -> Stored:
        while len(self.buffer) >= PART_BYTES:
            await self._part(bytes(self.buffer[:PART_BYTES]))
            del self.buffer[:PART_BYTES]
        whole = len(self.parts) * PART_BYTES
        if final:
            return Stored(whole + len(self.buffer), list(self.parts), bytes(self.buffer))
        # The buffer is not stored yet: the offset stays at the parts, the old tail is in
        # them or still in the buffer.
        return Stored(whole, list(self.parts), None)

    async def complete(self) -> None:
        if self.buffer or not self.parts:
            await self._part(bytes(self.buffer))
            self.buffer.clear()
        await self.client.complete(self.name, self.multipart_id, self.parts)

    def digest(self) -> str | None:
        return None

    def close(self) -> None:
        self.buffer = bytearray()


class S3Parts:
    storage = "s3"

    def __init__(self, client: MultipartClient) -> None:
        self.client = client

    @staticmethod
    def object_name(upload_id: str) -> str:
        # Outside the artifacts' ab/cd/<sha256> names; an object left by a crash between
        # completing and ingesting is unreferenced, so retention removes it.
        return f"uploads/{upload_id}"

    async def start(self, upload_id: str) -> str | None:
        return await self.client.create(self.object_name(upload_id))

    def open(self, row: Record) -> Writer:
        return _S3Writer(self.client, row)

    async def assemble(self, row: Record, target: Path) -> None:
        name = self.object_name(row.id)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            async for chunk in self.client.get(name):
                await asyncio.to_thread(_write_all, fd, chunk)
        finally:
            os.close(fd)

    async def discard(self, row: Record) -> None:
        name = self.object_name(row.id)
        if row.multipart_id:
            await self.client.abort(name, row.multipart_id)
        await self.client.delete(name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link when the scratch space is on the same file system (no copy)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
