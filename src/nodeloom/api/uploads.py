"""Receiving files: a raw body or multipart/form-data, streamed to a file on disk as it
arrives, never held whole in memory, with the size cap enforced while reading (whatever
Content-Length says, or when the body is chunked and has none).

Chunks are gathered up to ``FLUSH_BYTES`` and written (and hashed) in a worker thread, so
the event loop only moves bytes between the socket and that thread. The multipart parser is
python-multipart's streaming one, fed chunk by chunk.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from nodeloom.errors import FieldError, InvalidRequest, PayloadTooLarge
from nodeloom.nodes.sniff import HEAD_BYTES
from nodeloom.uploads.received import ReceivedFile

FLUSH_BYTES = 1024 * 1024
MAX_FIELD_BYTES = 1024 * 1024  # a form field that is not a file (the run input, a name)
MAX_FILES = 16
MAX_NAME = 255


class _Sink:
    """Bytes of one file: kept in memory up to FLUSH_BYTES, then written and hashed in a
    thread; refused (PayloadTooLarge) past ``max_bytes``."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.size = 0
        self.head = b""
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.hasher = hashlib.sha256()
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_bytes:
            raise PayloadTooLarge(
                f"The file is larger than {self.max_bytes} bytes, the most this account may "
                "upload at once.",
                extra={"limit": self.max_bytes},
            )
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        self.pending.append(data)
        self.pending_bytes += len(data)

    @property
    def full(self) -> bool:
        return self.pending_bytes >= FLUSH_BYTES

    def _write(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.hasher.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(self.fd, view) :]

    async def flush(self) -> None:
        if not self.pending:
            return
        chunks, self.pending, self.pending_bytes = self.pending, [], 0
        await asyncio.to_thread(self._write, chunks)

    async def close(self, received: ReceivedFile) -> None:
        await self.flush()
        os.close(self.fd)
        self.fd = -1
        received.size, received.sha256, received.head = (
            self.size,
            self.hasher.hexdigest(),
            self.head,
        )

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _declared_too_large(request: Request, max_bytes: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(
            f"The file is larger than {max_bytes} bytes, the most this account may upload at once.",
            extra={"limit": max_bytes},
        )


async def receive_raw(
    request: Request, directory: Path, max_bytes: int, filename: str | None
) -> ReceivedFile:
    """The request body as one file in ``directory``."""
    _declared_too_large(request, max_bytes)
    received = ReceivedFile(directory / f"raw-{uuid.uuid4().hex}", "body", filename)
    await receive_stream(request.stream(), received, max_bytes)
    if received.size == 0:
        raise InvalidRequest("The body is empty.", errors=[FieldError("", "no file was sent")])
    return received


async def receive_stream(
    chunks: AsyncIterator[bytes], received: ReceivedFile, max_bytes: int
) -> None:
    """``chunks`` written to ``received.path``, its size, sha256 and head filled in;
    PayloadTooLarge past ``max_bytes``."""
    sink = _Sink(received.path, max_bytes)
    try:
        async for chunk in chunks:
            sink.add(chunk)
            if sink.full:
                await sink.flush()
        await sink.close(received)
    finally:
        sink.abort()


@dataclass
class Form:
    """A multipart body as received: text fields in memory, files on disk."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[ReceivedFile] = field(default_factory=list)


class _FormReader:
    def __init__(self, directory: Path, max_file_bytes: int, max_total_bytes: int) -> None:
        self.directory = directory
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.total = 0
        self.form = Form()
        self.header_field = b""
        self.header_value = b""
        self.headers: dict[bytes, bytes] = {}
        self.sink: _Sink | None = None
        self.current: ReceivedFile | None = None
        self.text: bytearray | None = None
        self.name = ""
        self.finished: list[tuple[_Sink, ReceivedFile]] = []

    def on_part_begin(self) -> None:
        self.headers = {}

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[self.header_field.lower()] = self.header_value
        self.header_field = self.header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        self.name = options.get(b"name", b"").decode("utf-8", "replace")[:MAX_NAME]
        filename = options.get(b"filename")
        if filename is None:
            self.text = bytearray()
            return
        if len(self.form.files) >= MAX_FILES:
            raise InvalidRequest(f"At most {MAX_FILES} files may be sent at once.")
        name = filename.decode("utf-8", "replace").replace("\\", "/").rsplit("/", 1)[-1]
        path = self.directory / f"part-{uuid.uuid4().hex}"
        self.current = ReceivedFile(path, self.name, name[:MAX_NAME] or None)
        self.sink = _Sink(path, self.max_file_bytes)
        self.form.files.append(self.current)

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        self.total += len(piece)
        if self.total > self.max_total_bytes:
            raise PayloadTooLarge(f"The body is larger than {self.max_total_bytes} bytes.")
        if self.sink is not None:
            self.sink.add(piece)
        elif self.text is not None:
            if len(self.text) + len(piece) > MAX_FIELD_BYTES:
                raise PayloadTooLarge(
                    f"The form field {self.name!r} is larger than {MAX_FIELD_BYTES} bytes."
                )
            self.text += piece

    def on_part_end(self) -> None:
        if self.sink is not None and self.current is not None:
            self.finished.append((self.sink, self.current))
            self.sink = self.current = None
        elif self.text is not None:
            try:
                self.form.fields[self.name] = self.text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRequest(
                    f"The form field {self.name!r} is not UTF-8.",
                    errors=[FieldError(f"form:{self.name}", "not UTF-8")],
                ) from exc
            self.text = None

    def sinks(self) -> list[_Sink]:
        open_sink = [self.sink] if self.sink is not None else []
        return [sink for sink, _ in self.finished] + open_sink


async def receive_form(
    request: Request, directory: Path, max_file_bytes: int, max_total_bytes: int
) -> Form:
    """A multipart/form-data body: its text fields, and its files streamed to ``directory``
    (each at most ``max_file_bytes``, all at most ``max_total_bytes``)."""
    _, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if not boundary:
        raise InvalidRequest(
            "A multipart body needs a boundary in its Content-Type.",
            errors=[FieldError("header:content-type", "no boundary")],
        )
    _declared_too_large(request, max_total_bytes)
    reader = _FormReader(directory, max_file_bytes, max_total_bytes)
    callbacks = {
        name: getattr(reader, name)
        for name in (
            "on_part_begin",
            "on_part_data",
            "on_part_end",
            "on_header_field",
            "on_header_value",
            "on_header_end",
            "on_headers_finished",
        )
    }
    parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]
    try:
        async for chunk in request.stream():
            try:
                parser.write(chunk)
            except (PayloadTooLarge, InvalidRequest):
                raise
            except Exception as exc:  # python-multipart's own errors about the body
                raise InvalidRequest(f"The multipart body is malformed: {exc}") from exc
            for sink in reader.sinks():
                if sink.full:
                    await sink.flush()
        parser.finalize()
        for sink, received in reader.finished:
            await sink.close(received)
    finally:
        for sink in reader.sinks():
            sink.abort()
    if reader.sink is not None or reader.text is not None:
        raise InvalidRequest("The multipart body ends in the middle of a part.")
    return reader.form


def is_multipart(request: Request) -> bool:
    content_type = request.headers.get("content-type", "")
    return content_type.split(";", 1)[0].strip().lower() == "multipart/form-data"
