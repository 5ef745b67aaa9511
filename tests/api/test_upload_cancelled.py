"""An upload the client gives up mid-body (the web app's cancel aborts its request; a
killed client just closes the connection), against a real server over a real socket: the
part received is removed from the scratch space, no asset is made and nothing is counted
against the storage quota; the same account's next upload is counted alone."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_assets import _noise_png
from tests.live import account
from tests.server import ServerProcess

BODY_BYTES = 8 * 1024 * 1024  # declared; the client sends a part of it, then goes away


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _received(data_dir: Path) -> list[Path]:
    """Files in the server's scratch space (uploads being received)."""
    return [p for p in (data_dir / "tmp").glob("*/node-*/*") if p.is_file()]


def _wait(predicate: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_client_that_goes_away_mid_body_leaves_no_asset_and_no_quota(
    server: ServerProcess,
) -> None:
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        _, key = account(http, "uploader@example.com")
        auth = {"Authorization": f"Bearer {key}"}
        head = _noise_png(71)
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(
                (
                    "POST /api/v1/uploads?name=big HTTP/1.1\r\n"
                    f"Host: 127.0.0.1:{server.port}\r\n"
                    f"Authorization: Bearer {key}\r\n"
                    "Content-Type: application/octet-stream\r\n"
                    f"Content-Length: {BODY_BYTES}\r\n\r\n"
                ).encode()
            )
            sock.sendall(head + b"\0" * (2 * 1024 * 1024))
            # The server is receiving it: a part is on disk in its scratch space.
            _wait(
                lambda: any(p.stat().st_size > 1024 * 1024 for p in _received(server.data_dir)),
                "the partial body on disk",
            )
        # The connection is closed with most of the body unsent.
        _wait(lambda: not _received(server.data_dir), "the partial body to be removed")
        assert http.get("/api/v1/assets", headers=auth).json() == []
        assert http.get("/api/v1/storage", headers=auth).json()["used_bytes"] == 0

        # The next upload counts its own bytes only.
        r = http.post("/api/v1/uploads?name=small", content=head, headers=auth)
        assert r.status_code == 201, r.text
        storage = http.get("/api/v1/storage", headers=auth).json()
        assert storage["used_bytes"] == r.json()["size_bytes"]
        assert [a["name"] for a in http.get("/api/v1/assets", headers=auth).json()] == ["small"]
