"""Fixtures for node tests: a real ``NodeContext`` (``media.LocalContext``), helpers that turn
bytes into input artifacts, and small REAL HTTP servers on 127.0.0.1: a fake OpenAI-compatible
provider (tests/fakes.py, with scripted failures for the retry tests) and a plain site for
HttpRequest."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from nodeloom.nodes import media
from nodeloom.sdk._node import CONTENT_TYPES, ArtifactRef, InputValue, Kind, NodeType, Produced
from nodeloom.settings import Settings
from tests.fakes import FakeServer, Recorded, fake_provider, serve

SECRET = "node-tests-secret-" + "y" * 40


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "secret_key": SECRET,
        "provider_base_url": None,
        "provider_api_key": None,
        "provider_max_retries": 3,
        "provider_timeout_seconds": 10.0,
        "http_allowlist": [],
        "http_timeout_seconds": 10.0,
    }
    values.update(overrides)
    return Settings(**values).prepare()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data")


@pytest.fixture
def ctx(settings: Settings, tmp_path: Path) -> media.LocalContext:
    return media.LocalContext(settings=settings, scratch_dir=tmp_path / "scratch")


class Artifacts:
    """Makes input artifacts the way the executor hands them to nodes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def text(self, value: str) -> ArtifactRef:
        return self.put(Produced.text(value), Kind.TEXT)

    def image(self, width: int = 64, height: int = 48, color: str = "#3366cc") -> ArtifactRef:
        image = Image.new("RGB", (width, height), color)
        # A diagonal stripe so filters, crops and rotations have something to change.
        for i in range(min(width, height)):
            image.putpixel((i, i), (255, 255, 0))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return self.put(Produced(data=buffer.getvalue(), width=width, height=height), Kind.IMAGE)

    def audio(self, seconds: float = 0.5, frequency: float = 440) -> ArtifactRef:
        n = round(seconds * media.SAMPLE_RATE)
        t = np.arange(n, dtype=np.float32) / media.SAMPLE_RATE
        mono = (0.3 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)
        path = self.directory / f"tone-{seconds}-{frequency}.mp3"
        self.directory.mkdir(parents=True, exist_ok=True)
        produced = media.encode_mp3(np.stack([mono, mono]), path, Settings())
        return self.put(produced, Kind.AUDIO)

    def video(
        self, seconds: float = 0.6, size: tuple[int, int] = (64, 48), sound: bool = True
    ) -> ArtifactRef:
        path = self.directory / f"clip-{seconds}-{size}-{sound}.mp4"
        self.directory.mkdir(parents=True, exist_ok=True)
        fps = 10
        audio = None
        if sound:
            n = round(seconds * media.SAMPLE_RATE)
            audio = np.full((2, n), 0.1, dtype=np.float32) * np.sin(np.arange(n) / 20).astype(
                np.float32
            )
        writer = media.VideoWriter(path, *size, fps, audio=audio)
        for i in range(round(seconds * fps)):
            writer.write_image(Image.new("RGB", size, (i * 20 % 256, 80, 160)))
        writer.close()
        return self.put(writer.produced(Settings()), Kind.VIDEO)

    def put(self, produced: Produced, kind: Kind) -> ArtifactRef:
        return media.store_locally(produced, CONTENT_TYPES[kind], self.directory)


@pytest.fixture
def artifacts(tmp_path: Path) -> Artifacts:
    return Artifacts(tmp_path / "artifacts")


async def run_node(
    node: NodeType,
    ctx: media.LocalContext,
    params: Mapping[str, Any] | None = None,
    inputs: Mapping[str, InputValue] | None = None,
) -> Produced:
    """Validate params with the node's own model, as the executor does, and run it."""
    model = node.spec.params.model_validate(dict(params or {}))
    return await node.run(ctx, model, dict(inputs or {}))


# ----------------------------------------------------------------------------- HTTP servers


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[FakeServer]:
    """A fake OpenAI-compatible API (tests/fakes.py)."""
    with fake_provider(tmp_path) as server:
        yield server


@pytest.fixture
def provider_settings(tmp_path: Path, provider: FakeServer) -> Settings:
    return make_settings(
        tmp_path / "pdata",
        provider_base_url=provider.url + "/v1",
        provider_api_key="sk-test-key",
    )


@pytest.fixture
def site() -> Iterator[FakeServer]:
    """A plain website: /hello (text), /json, /big (2 MB), /redirect?to=URL, /loop."""
    server: FakeServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length) if length else b""
            server.requests.append(Recorded(self.command, self.path, dict(self.headers), body))
            path, _, query = self.path.partition("?")
            if path == "/redirect":
                self.send_response(302)
                self.send_header("Location", query.removeprefix("to="))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path == "/loop":
                self.send_response(301)
                self.send_header("Location", "/loop")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path == "/big":
                data = b"x" * 2_000_000
            elif path == "/echo":
                data = json.dumps(
                    {"method": self.command, "body": body.decode(), "host": self.headers["Host"]}
                ).encode()
            elif path == "/missing":
                self.send_response(404)
                self.send_header("Content-Length", "9")
                self.end_headers()
                self.wfile.write(b"not found")
                return
            else:
                data = "héllo wörld — привет".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _answer
        do_POST = _answer

    server = serve(Handler)
    try:
        yield server
    finally:
        server.stop()
