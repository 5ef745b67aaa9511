"""Messages between the server and a sandbox process: a 4-byte big-endian length, a JSON
object, and — when the object says ``"blob": n`` — n raw bytes (an artifact's content).

JSON, never pickle, in both directions: the server must be able to read whatever a sandbox
process sends without trusting it, because that process runs tenant-controlled work.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from typing import Any

import orjson

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 * 1024 * 1024  # the JSON part; a blob is bounded by the artifact size cap


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message."""


def encode(message: dict[str, Any], blob: bytes = b"") -> bytes:
    if blob:
        message = {**message, "blob": len(blob)}
    body = orjson.dumps(message)
    return HEADER.pack(len(body)) + body + blob


def _decode(body: bytes) -> dict[str, Any]:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    return message


def _blob_size(message: dict[str, Any], max_blob: int) -> int:
    size = message.get("blob", 0)
    if not isinstance(size, int) or not 0 <= size <= max_blob:
        raise ProtocolError(f"bad blob size {size!r}")
    return size


async def read(reader: asyncio.StreamReader, max_blob: int) -> tuple[dict[str, Any], bytes]:
    """One message (the server side). Raises IncompleteReadError when the peer is gone."""
    (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    if length > MAX_MESSAGE:
        raise ProtocolError(f"message of {length} bytes is too large")
    message = _decode(await reader.readexactly(length))
    size = _blob_size(message, max_blob)
    blob = await reader.readexactly(size) if size else b""
    return message, blob


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_blocking(sock: socket.socket, max_blob: int) -> tuple[dict[str, Any], bytes]:
    """One message (the sandbox side). Raises EOFError when the server is gone."""
    (length,) = HEADER.unpack(_recv_exactly(sock, HEADER.size))
    if length > MAX_MESSAGE:
        raise ProtocolError(f"message of {length} bytes is too large")
    message = _decode(_recv_exactly(sock, length))
    size = _blob_size(message, max_blob)
    return message, (_recv_exactly(sock, size) if size else b"")


def write_blocking(sock: socket.socket, message: dict[str, Any], blob: bytes = b"") -> None:
    sock.sendall(encode(message, blob))


def exit_code_of(status: int) -> int:
    """A wait status as subprocess reports it: the exit code, or minus the signal number."""
    return os.waitstatus_to_exitcode(status)
