"""A resumable upload whose client goes away in the middle of a PATCH body, against real
``nodeloom serve`` processes over real sockets: the bytes that arrived are kept (HEAD
says how many), and the upload is finished from there on another server process sharing
the data directory."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_uploads_tus import big_png, metadata
from tests.live import account
from tests.server import ServerProcess

V = {"Tus-Resumable": "1.0.0"}


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    first = ServerProcess(tmp_path / "data")
    second = ServerProcess(tmp_path / "data")
    first.start()
    try:
        second.start()
        try:
            yield first, second
        finally:
            second.stop()
    finally:
        first.stop()


def test_a_patch_cut_off_keeps_its_bytes_and_another_process_finishes(
    servers: tuple[ServerProcess, ServerProcess],
) -> None:
    first, second = servers
    data = big_png(700, seed=11)  # about 1.5 MB
    sent = len(data) // 2
    with httpx.Client(base_url=first.base_url, timeout=60) as http:
        _, key = account(http, "resumer@example.com")
        auth = {"Authorization": f"Bearer {key}", **V}
        r = http.post(
            "/api/v1/uploads/tus",
            headers={
                **auth,
                "Upload-Length": str(len(data)),
                "Upload-Metadata": metadata("cut.png"),
            },
        )
        assert r.status_code == 201, r.text
        path = httpx.URL(r.headers["location"]).path

        with socket.create_connection(("127.0.0.1", first.port)) as sock:
            sock.sendall(
                (
                    f"PATCH {path} HTTP/1.1\r\n"
                    f"Host: 127.0.0.1:{first.port}\r\n"
                    f"Authorization: Bearer {key}\r\n"
                    "Tus-Resumable: 1.0.0\r\n"
                    "Upload-Offset: 0\r\n"
                    "Content-Type: application/offset+octet-stream\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n"
                ).encode()
            )
            sock.sendall(data[:sent])
        # The client is gone with half the body unsent: what arrived is stored.
        deadline = time.monotonic() + 30
        while True:
            r = http.head(path, headers=auth)
            assert r.status_code == 200, r.status_code
            if r.headers["upload-offset"] == str(sent):
                break
            assert time.monotonic() < deadline, r.headers["upload-offset"]
            time.sleep(0.05)

    with httpx.Client(base_url=second.base_url, timeout=60) as http:
        r = http.head(path, headers=auth)
        offset = int(r.headers["upload-offset"])
        assert offset == sent
        r = http.patch(
            path,
            content=data[offset:],
            headers={
                **auth,
                "Upload-Offset": str(offset),
                "Content-Type": "application/offset+octet-stream",
            },
        )
        assert r.status_code == 204, r.text
        asset_id = r.headers["nodeloom-asset-id"]
        asset = http.get(f"/api/v1/assets/{asset_id}", headers=auth).json()
        assert asset["name"] == "cut.png" and (asset["width"], asset["height"]) == (700, 700)
        storage = http.get("/api/v1/storage", headers=auth).json()
        assert storage["used_bytes"] == asset["size_bytes"]
