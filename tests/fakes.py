"""Small REAL HTTP servers on 127.0.0.1 standing in for third-party services: a fake
OpenAI-compatible provider and a fake ElevenLabs, written from their published API
references (with scripted failures for the retry tests). Shared by the node tests, the API
tests and the end-to-end example tests."""

from __future__ import annotations

import base64
import contextlib
import email.parser
import email.policy
import io
import json
import re
import threading
import time
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
    # The multipart forms received (field name -> (file name or None, bytes)), in order.
    forms: list[dict[str, tuple[str | None, bytes]]] = field(default_factory=list)
    delay: float = 0.0  # seconds a generation takes (ElevenLabs speech), for slow runs
    # Set: the OpenAI fake answers a POST only once it is set (a call held in flight).
    gate: threading.Event | None = None

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


def parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body as field name -> (file name or None, bytes)."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(name, str) and isinstance(payload, bytes), part
        parts[name] = (part.get_filename(), payload)
    return parts


# What the fake transcribes any audio to (OpenAI's verbose_json segments).
TRANSCRIPT_SEGMENTS = [
    {"id": 0, "start": 0.0, "end": 0.2, "text": " Hello there."},
    {"id": 1, "start": 0.32, "end": 0.5, "text": " General Kenobi."},
]
EDITED_COLOR = (51, 102, 204)  # the colour of every image the fake's edits answer with


class QuietHandler(BaseHTTPRequestHandler):
    """A fake's request handler: logs nothing, answers with ``_send``."""

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
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client hung up first (a node cancelled, a test done with it): as a real
            # provider would, the fake drops the answer instead of printing a traceback.
            pass


def serve(handler: type[BaseHTTPRequestHandler]) -> FakeServer:
    """Serve ``handler`` on a free port in a thread; ``stop()`` ends it."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return FakeServer(httpd, thread)


# OpenAI's transcription models that answer json or text only (no verbose_json, so no
# segments), and the longest speech input /audio/speech takes.
JSON_ONLY_TRANSCRIBERS = ("gpt-4o-transcribe", "gpt-4o-mini-transcribe")
SPEECH_MAX_CHARS = 4096


def schema_instance(schema: dict[str, Any], prompt: str) -> Any:
    """A value following a (simple) JSON Schema, as a model asked for structured output
    answers: an enum's first value, the prompt for a string, 1 for a number, an object of
    every property."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: schema_instance(sub, prompt) for name, sub in properties.items()}
    if kind == "array":
        return [schema_instance(schema.get("items", {}), prompt)]
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return True
    return prompt


@contextlib.contextmanager
def fake_provider(tmp_path: Path) -> Iterator[FakeServer]:
    """A fake OpenAI-compatible API: /v1/chat/completions (answers "echo: <prompt>"),
    /v1/images/generations, /v1/audio/speech, /v1/images/edits (multipart: answers an image
    of the uploaded one's size in ``EDITED_COLOR``; refuses a mask of another size with 400
    as OpenAI does) and /v1/audio/transcriptions (multipart: answers
    ``TRANSCRIPT_SEGMENTS`` as verbose_json, or their text for any other format; as OpenAI,
    it refuses verbose_json from the ``gpt-4o-*-transcribe`` models, and
    ``timestamp_granularities`` with any other format, with 400 ``unsupported_value``);
    speech input over ``SPEECH_MAX_CHARS`` is refused with 400 as OpenAI refuses it."""
    mp3 = _speech_mp3(tmp_path)
    png = _png(40, 30)
    server: FakeServer

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            server.requests.append(Recorded("POST", self.path, dict(self.headers), body))
            if server.gate is not None:
                server.gate.wait(60)
            if server.failures:
                status, headers = server.failures.pop(0)
                error = json.dumps({"error": {"message": f"scripted {status}"}}).encode()
                self._send(status, error, "application/json", headers)
                return
            content_type = self.headers.get("Content-Type", "")
            if content_type.startswith("multipart/form-data"):
                form = parse_multipart(content_type, body)
                server.forms.append(form)
                self._multipart(form)
                return
            payload = json.loads(body)
            if self.path == "/v1/chat/completions":
                prompt = payload["messages"][-1]["content"]
                content = f"echo: {prompt}"
                response_format = payload.get("response_format") or {}
                if response_format.get("type") == "json_schema":
                    # Structured output: the content is a JSON text following the schema.
                    schema = response_format["json_schema"]["schema"]
                    content = json.dumps(schema_instance(schema, prompt))
                answer = {"choices": [{"message": {"role": "assistant", "content": content}}]}
                self._send(200, json.dumps(answer).encode(), "application/json")
            elif self.path == "/v1/images/generations":
                answer = {"data": [{"b64_json": base64.b64encode(png).decode()}]}
                self._send(200, json.dumps(answer).encode(), "application/json")
            elif self.path == "/v1/audio/speech":
                if len(payload.get("input", "")) > SPEECH_MAX_CHARS:
                    self._error(
                        400,
                        f"[{{'type': 'string_too_long', 'loc': ('body', 'input'), "
                        f"'msg': 'String should have at most {SPEECH_MAX_CHARS} characters'}}]",
                    )
                    return
                self._send(200, mp3, "audio/mpeg")
            else:
                self._send(404, b'{"error": {"message": "no such endpoint"}}', "application/json")

        def _error(self, status: int, message: str) -> None:
            body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
            self._send(status, body.encode(), "application/json")

        def _unsupported(self, param: str, message: str) -> None:
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": "unsupported_value",
            }
            self._send(400, json.dumps({"error": error}).encode(), "application/json")

        def _multipart(self, form: dict[str, tuple[str | None, bytes]]) -> None:
            if self.path == "/v1/images/edits":
                if "image" not in form or "prompt" not in form:
                    self._error(400, "image and prompt are required")
                    return
                with Image.open(io.BytesIO(form["image"][1])) as image:
                    size = image.size
                if "mask" in form:
                    with Image.open(io.BytesIO(form["mask"][1])) as mask:
                        if mask.size != size or mask.mode != "RGBA":
                            self._error(
                                400,
                                "Invalid mask image: it must be an RGBA PNG "
                                "of the same size as the image.",
                            )
                            return
                out = io.BytesIO()
                Image.new("RGB", size, EDITED_COLOR).save(out, format="PNG")
                answer = {"data": [{"b64_json": base64.b64encode(out.getvalue()).decode()}]}
                self._send(200, json.dumps(answer).encode(), "application/json")
            elif self.path == "/v1/audio/transcriptions":
                if "file" not in form or form["file"][0] is None:
                    self._error(400, "file is required")
                    return
                text = "".join(str(s["text"]) for s in TRANSCRIPT_SEGMENTS).strip()
                fmt = form.get("response_format", (None, b"json"))[1].decode()
                model = form.get("model", (None, b""))[1].decode()
                if model in JSON_ONLY_TRANSCRIBERS and fmt not in ("json", "text"):
                    self._unsupported(
                        "response_format",
                        f"response_format '{fmt}' is not compatible with model '{model}'. "
                        "Use 'json' or 'text' instead.",
                    )
                    return
                if "timestamp_granularities[]" in form and fmt != "verbose_json":
                    self._unsupported(
                        "timestamp_granularities",
                        "timestamp_granularities is only supported with "
                        "response_format=verbose_json",
                    )
                    return
                if fmt == "verbose_json":
                    answer = {
                        "task": "transcribe",
                        "language": "english",
                        "duration": 0.5,
                        "text": text,
                        "segments": TRANSCRIPT_SEGMENTS,
                    }
                    self._send(200, json.dumps(answer).encode(), "application/json")
                else:
                    self._send(200, json.dumps({"text": text}).encode(), "application/json")
            else:
                self._error(404, "no such endpoint")

    server = serve(Handler)
    try:
        yield server
    finally:
        server.stop()


ELEVENLABS_VOICE = "21m00Tcm4TlvDq8ikWAM"  # a premade voice every account has


@contextlib.contextmanager
def fake_elevenlabs(tmp_path: Path) -> Iterator[FakeServer]:
    """A fake ElevenLabs API: ``POST /v1/text-to-speech/{voice_id}`` answers MP3 for a known
    voice (``ELEVENLABS_VOICE`` or any id starting with "voice"), ``GET /v1/user`` answers
    the subscription; the key is read from ``xi-api-key``, and one containing "refused" is
    refused with 401 in ElevenLabs' error shape ({"detail": {"status", "message"}})."""
    mp3 = _speech_mp3(tmp_path)
    server: FakeServer

    class Handler(QuietHandler):
        def _detail(
            self, status: int, code: str, message: str, extra: Mapping[str, str] = {}
        ) -> None:
            body = json.dumps({"detail": {"status": code, "message": message}}).encode()
            self._send(status, body, "application/json", extra)

        def _refused(self) -> bool:
            key = self.headers.get("xi-api-key", "")
            if not key or "refused" in key:
                self._detail(401, "invalid_api_key", "Invalid API key")
                return True
            return False

        def do_GET(self) -> None:
            server.requests.append(Recorded("GET", self.path, dict(self.headers), b""))
            if self._refused():
                return
            if self.path == "/v1/user":
                body = {"subscription": {"tier": "free", "character_count": 0}}
                self._send(200, json.dumps(body).encode(), "application/json")
            else:
                self._detail(404, "not_found", "Not found")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            server.requests.append(Recorded("POST", self.path, dict(self.headers), body))
            if server.failures:
                status, headers = server.failures.pop(0)
                self._detail(status, "scripted", f"scripted {status}", headers)
                return
            if self._refused():
                return
            match = re.fullmatch(r"/v1/text-to-speech/([A-Za-z0-9]+)(\?.*)?", self.path)
            if match is None:
                self._detail(404, "not_found", "Not found")
                return
            time.sleep(server.delay)  # a slow generation (threaded server: others proceed)
            voice = match.group(1)
            if voice != ELEVENLABS_VOICE and not voice.startswith("voice"):
                self._detail(
                    404, "voice_not_found", f"A voice with the voice_id {voice} was not found."
                )
                return
            payload = json.loads(body)
            if not payload.get("text"):
                self._detail(422, "invalid_text", "text is required")
                return
            self._send(200, mp3, "audio/mpeg")

    server = serve(Handler)
    try:
        yield server
    finally:
        server.stop()
