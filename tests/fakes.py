"""Small REAL HTTP servers on 127.0.0.1 standing in for third-party services: a fake
OpenAI-compatible provider (with scripted failures for the retry tests). Shared by the node
tests and the end-to-end example tests."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from nodeloom.nodes import media
from nodeloom.settings import Settings


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeServer:
    """A real threaded HTTP server on 127.0.0.1. ``failures`` is a queue of (status, headers)
    answered before the real answer, to script 429/500 retry cases."""

    httpd: ThreadingHTTPServer
    thread: threading.Thread
    requests: list[Recorded] = field(default_factory=list)
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "#cc3366").save(buffer, format="PNG")
    return buffer.getvalue()


def _speech_mp3(tmp: Path) -> bytes:
    n = media.SAMPLE_RATE // 2
    samples = np.zeros((2, n), dtype=np.float32)
    samples[:, ::50] = 0.2
    path = tmp / "speech.mp3"
    media.encode_mp3(samples, path, Settings())
    return path.read_bytes()


def serve(handler: type[BaseHTTPRequestHandler]) -> FakeServer:
    """Serve ``handler`` on a free port in a thread; ``stop()`` ends it."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return FakeServer(httpd, thread)


@contextlib.contextmanager
def fake_provider(tmp_path: Path) -> Iterator[FakeServer]:
    """A fake OpenAI-compatible API: /v1/chat/completions (answers "echo: <prompt>"),
    /v1/images/generations and /v1/audio/speech."""
    mp3 = _speech_mp3(tmp_path)
    png = _png(40, 30)
    server: FakeServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(
            self, status: int, body: bytes, content_type: str, extra: Mapping[str, str] = {}
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            server.requests.append(Recorded("POST", self.path, dict(self.headers), body))
            if server.failures:
                status, headers = server.failures.pop(0)
                error = json.dumps({"error": {"message": f"scripted {status}"}}).encode()
                self._send(status, error, "application/json", headers)
                return
            payload = json.loads(body)
            if self.path == "/v1/chat/completions":
                prompt = payload["messages"][-1]["content"]
                answer = {
                    "choices": [{"message": {"role": "assistant", "content": f"echo: {prompt}"}}]
                }
                self._send(200, json.dumps(answer).encode(), "application/json")
            elif self.path == "/v1/images/generations":
                answer = {"data": [{"b64_json": base64.b64encode(png).decode()}]}
                self._send(200, json.dumps(answer).encode(), "application/json")
            elif self.path == "/v1/audio/speech":
                self._send(200, mp3, "audio/mpeg")
            else:
                self._send(404, b'{"error": {"message": "no such endpoint"}}', "application/json")

    server = serve(Handler)
    try:
        yield server
    finally:
        server.stop()
