"""Small REAL HTTP servers on 127.0.0.1 speaking Replicate's and fal's published HTTP APIs
(https://replicate.com/docs/reference/http, https://docs.fal.ai/model-endpoints/queue),
returning real PNG/JPEG/MP4/MP3/WAV bytes made with Pillow and PyAV. They count paid
submissions, record every request, and can be scripted: slow jobs, 429 with Retry-After,
5xx, failures, output URLs at private addresses, oversized outputs.

Files sent to a model are taken the ways the official clients send them: inline as data:
URIs (a request carrying more than ``Script.data_uri_max`` bytes of them is refused, 413:
replicate-javascript refuses to inline more than 10 MB, and Replicate's documentation
recommends data URIs only below 1 MB), or uploaded first: Replicate's ``POST /v1/files``
(multipart, the file in the ``content`` part; 201 with the file object and its
``urls.get``), fal's storage (``POST /storage/upload/initiate?storage_type=gcs`` answering a
signed ``upload_url`` and the ``file_url``; the PUT to the signed URL refused with another
credential or another Content-Type than the one signed). A job whose input names a file URL
of the fake that was never uploaded fails, as the model could not fetch it."""

from __future__ import annotations

import base64
import email
import email.policy
import hashlib
import hmac
import io
import json
import re
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
from PIL import Image

from nodeloom.nodes import media
from nodeloom.settings import Settings
from tests.fakes import FakeServer, serve

REPLICATE_TOKEN = "r8_fakeReplicateToken0123456789abcdef"
FAL_KEY = "fal-key-id:fal-key-secret-0123456789abcdef"


def png_bytes(width: int = 40, height: int = 30) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "#cc3366").save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg_bytes(width: int = 40, height: int = 30) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "#3366cc").save(buffer, format="JPEG")
    return buffer.getvalue()


def mp3_bytes(tmp: Path, seconds: float = 1.0) -> bytes:
    n = round(media.SAMPLE_RATE * seconds)
    t = np.arange(n, dtype=np.float32) / media.SAMPLE_RATE
    mono = (0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)
    path = tmp / f"music-{seconds}.mp3"
    media.encode_mp3(np.stack([mono, mono]), path, Settings())
    return path.read_bytes()


def wav_bytes(tmp: Path, seconds: float = 1.0) -> bytes:
    rate = 22050
    path = tmp / f"music-{seconds}.wav"
    with av.open(str(path), "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=rate, layout="mono")
        t = np.arange(round(rate * seconds)) / rate
        samples = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)[None, :]
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path.read_bytes()


def mp4_bytes(tmp: Path, seconds: int = 2, fps: int = 8) -> bytes:
    path = tmp / f"clip-{seconds}.mp4"
    writer = media.VideoWriter(path, 64, 48, fps)
    for i in range(seconds * fps):
        writer.write_image(Image.new("RGB", (64, 48), (i * 10 % 255, 90, 160)))
    writer.close()
    return path.read_bytes()


@dataclass
class Job:
    id: str
    model: str
    input: dict[str, Any]
    started: float
    cancelled: bool = False
    webhook: str | None = None
    events: tuple[str, ...] = ()
    error: str | None = None  # the job fails with this (an input it could not fetch)


@dataclass
class Script:
    """How the fake behaves; change it between tests."""

    seconds: float = 0.0  # how long a job runs
    output: str = "image"  # which file a job returns (a key of ``files``), or "text"
    output_url: str | None = None  # the URL handed back instead of our own file's
    by_model: dict[str, str] = field(default_factory=dict)  # model substring -> output
    fail: str | None = None  # the job fails with this error
    # fal: the request fails on fal's side (a runner lost, a timeout) with this
    # ``error_type``: its COMPLETED status carries ``error`` (``fail``) and ``error_type``
    # (unless ``fal_status_quiet``), and its result answers 500 with them.
    fal_error_type: str | None = None
    fal_status_quiet: bool = False
    model_delay: float = 0.0  # seconds GET /v1/models/... takes to answer
    # Answers served before the real ones, for matching requests: (method, path regex,
    # status, headers, body).
    before: list[tuple[str, str, int, dict[str, str], Any]] = field(default_factory=list)
    # Set: a submission's job is made (and counted) at once, but its answer waits until the
    # event is set (a create call held in flight while a test cancels the run).
    hold: threading.Event | None = None
    # Replicate: hand out the signing secret (GET /v1/webhooks/default/secret) and POST
    # signed webhooks to the URL a prediction names; ``webhooks_lost`` sends none (a lost
    # delivery); ``webhook_signing`` replaces the secret they are signed with.
    webhooks: bool = False
    webhooks_lost: bool = False
    webhook_signing: str | None = None
    data_uri_max: int = 10_000_000  # bytes of data: URIs one submission may carry
    # Replicate: the shape of a succeeded prediction's file output, as models answer it:
    # "list" ([url], most image models), "string" (url), "object" ({"image": url}, models
    # with named outputs) or "data" (a data: URI, what a prediction made with Prefer: wait
    # may return in place of a URL).
    output_shape: str = "list"


class _Fake:
    token_header: str = ""

    def __init__(self, tmp: Path) -> None:
        self.deliveries: list[tuple[str, str, int | None]] = []
        self.script = Script()
        self.jobs: dict[str, Job] = {}
        self.submissions = 0
        self.cancels: list[str] = []
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.peers: list[int] = []  # the client port of each request: its TCP connection
        self.lock = threading.Lock()
        # Files uploaded to the provider: id -> (name, content type, bytes).
        self.uploads: dict[str, tuple[str, str, bytes]] = {}
        self.files: dict[str, tuple[str, bytes]] = {
            "image": ("image/png", png_bytes()),
            "jpeg": ("image/jpeg", jpeg_bytes()),
            "video": ("video/mp4", mp4_bytes(tmp)),
            "audio": ("audio/mpeg", mp3_bytes(tmp)),
            "wav": ("audio/wav", wav_bytes(tmp)),
            "big": ("image/png", png_bytes() + b"\0" * 300_000),
        }
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # As the real APIs: HTTP/1.1, connections kept alive between requests.
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                content_type = "application/json" if not isinstance(body, bytes) else None
                for name, value in {
                    **({"Content-Type": content_type} if content_type else {}),
                    **(headers or {}),
                }.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_any(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                fake.requests.append((method, self.path, dict(self.headers), body))
                fake.peers.append(self.client_address[1])
                if self.path.startswith("/files/"):
                    kind = self.path.removeprefix("/files/")
                    content_type, data = fake.files[kind]
                    self.answer(200, data, {"Content-Type": content_type})
                    return
                unsigned = fake.open_route(method, self.path, dict(self.headers), raw)
                if unsigned is not None:
                    self.answer(*unsigned)
                    return
                if self.headers.get("Authorization") != fake.token_header:
                    self.answer(401, {"detail": "Invalid token."})
                    return
                with fake.lock:
                    scripted = next(
                        (
                            (index, item)
                            for index, item in enumerate(fake.script.before)
                            if item[0] == method and re.fullmatch(item[1], self.path.split("?")[0])
                        ),
                        None,
                    )
                    if scripted is not None:
                        del fake.script.before[scripted[0]]
                if scripted is not None:
                    _, _, status, headers, answer = scripted[1]
                    self.answer(status, answer, headers)
                    return
                status, answer = fake.route(method, self.path, body, dict(self.headers))
                self.answer(status, answer)

            def do_GET(self) -> None:
                self.handle_any("GET")

            def do_POST(self) -> None:
                self.handle_any("POST")

            def do_PUT(self) -> None:
                self.handle_any("PUT")

        self.server: FakeServer = serve(Handler)

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()

    def new_job(self, model: str, payload: dict[str, Any]) -> Job:
        with self.lock:
            self.submissions += 1
            job = Job(uuid.uuid4().hex[:20], model, payload, time.monotonic())
            self.jobs[job.id] = job
        if self.script.hold is not None:
            self.script.hold.wait(30)
        return job

    def done(self, job: Job) -> bool:
        return time.monotonic() - job.started >= self.script.seconds

    def fraction(self, job: Job) -> float:
        if self.script.seconds <= 0:
            return 1.0
        return min(1.0, (time.monotonic() - job.started) / self.script.seconds)

    def output_of(self, job: Job) -> str:
        for part, output in self.script.by_model.items():
            if part in job.model:
                return output
        return self.script.output

    def output_url(self, job: Job) -> str:
        return self.script.output_url or f"{self.url}/files/{self.output_of(job)}"

    def file_output(self, job: Job) -> Any:
        """A Replicate prediction's file output in the shape ``script.output_shape`` names."""
        shape = self.script.output_shape
        if shape == "data":
            content_type, data = self.files[self.output_of(job)]
            return f"data:{content_type};base64,{base64.b64encode(data).decode()}"
        url = self.output_url(job)
        return {"string": url, "object": {"image": url}}.get(shape, [url])

    def route(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        raise NotImplementedError

    def open_route(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, Any, dict[str, str]] | None:
        """An answer to a request that carries no API key (a signed URL), else None."""
        return None

    def input_problem(self, payload: Any) -> tuple[int, Any] | None:
        """A submission's input refused as the provider refuses it: more data: URI bytes
        than ``data_uri_max`` (413)."""
        inline = sum(len(v) * 3 // 4 for v in _strings(payload) if v.startswith("data:"))
        if inline > self.script.data_uri_max:
            return 413, {"detail": f"Request body too large: {inline} bytes of data URIs"}
        return None

    def unfetchable(self, payload: Any) -> str | None:
        """The first URL of this fake's uploads in ``payload`` that names no uploaded file."""
        for value in _strings(payload):
            found = re.search(r"/(?:v1/files|gcs/files)/([^/?]+)", value)
            if value.startswith(self.url) and found and found.group(1) not in self.uploads:
                return value
        return None

    def upload_of(self, url: str) -> tuple[str, str, bytes]:
        """The file a URL of this fake names (for the tests' checks)."""
        found = re.search(r"/(?:v1/files|gcs/files)/([^/?]+)", url)
        assert found and url.startswith(self.url), url
        return self.uploads[found.group(1)]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for inner in value.values() for s in _strings(inner)]
    if isinstance(value, list):
        return [s for inner in value for s in _strings(inner)]
    return []


def multipart_parts(content_type: str, raw: bytes) -> list[tuple[str, str | None, str, bytes]]:
    """(name, filename, content type, bytes) of each part of a multipart/form-data body."""
    message = email.message_from_bytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw, policy=email.policy.HTTP
    )
    if not message.is_multipart():
        return []
    parts = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True)
        parts.append((str(name), part.get_filename(), part.get_content_type(), bytes(data or b"")))
    return parts


FLUX_VERSION = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"


def flux_openapi_schema() -> dict[str, Any]:
    """An OpenAPI document as Cog publishes it for a model version (abridged from
    black-forest-labs/flux-schnell): the Input's enums are components referenced through
    ``allOf``, fields carry ``x-order``."""
    return {
        "openapi": "3.0.2",
        "info": {"title": "Cog", "version": "0.1.0"},
        "paths": {},
        "components": {
            "schemas": {
                "Input": {
                    "type": "object",
                    "title": "Input",
                    "required": ["prompt"],
                    "properties": {
                        "seed": {
                            "type": "integer",
                            "title": "Seed",
                            "x-order": 3,
                            "description": "Random seed. Set for reproducible generation",
                        },
                        "prompt": {
                            "type": "string",
                            "title": "Prompt",
                            "x-order": 0,
                            "description": "Prompt for generated image",
                        },
                        "go_fast": {
                            "type": "boolean",
                            "title": "Go Fast",
                            "default": True,
                            "x-order": 4,
                            "description": "Run faster predictions with an fp8 model",
                        },
                        "num_outputs": {
                            "type": "integer",
                            "title": "Num Outputs",
                            "default": 1,
                            "maximum": 4,
                            "minimum": 1,
                            "x-order": 2,
                            "description": "Number of outputs to generate",
                        },
                        "aspect_ratio": {
                            "allOf": [{"$ref": "#/components/schemas/aspect_ratio"}],
                            "default": "1:1",
                            "x-order": 1,
                            "description": "Aspect ratio for the generated image",
                        },
                        "output_quality": {
                            "type": "integer",
                            "title": "Output Quality",
                            "default": 80,
                            "maximum": 100,
                            "minimum": 0,
                            "x-order": 5,
                            "description": "Quality when saving the output images",
                        },
                    },
                },
                "Output": {
                    "type": "array",
                    "items": {"type": "string", "format": "uri"},
                    "title": "Output",
                },
                "aspect_ratio": {
                    "enum": ["1:1", "16:9", "21:9", "3:2", "2:3", "4:5", "5:4", "9:16"],
                    "type": "string",
                    "title": "aspect_ratio",
                    "description": "An enumeration.",
                },
            }
        },
    }


def sign_delivery(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks, as Replicate signs: v1,<base64 HMAC-SHA256 of id.timestamp.body>
    keyed with the base64 part of the whsec_ secret."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(digest.digest()).decode()


class FakeReplicate(_Fake):
    token_header = f"Bearer {REPLICATE_TOKEN}"
    signing_secret = "whsec_" + base64.b64encode(b"fake-replicate-signing-key-32b!!").decode()
    # Every webhook POSTed: (event, prediction status, HTTP status answered or None).
    deliveries: list[tuple[str, str, int | None]]

    def send_webhooks(self, job: Job) -> None:
        """Like Replicate: ``start`` at once, ``logs`` as they change (at most every 0.3 s
        here), ``completed`` at the end (succeeded, failed or canceled), each signed."""
        url = job.webhook or ""
        if httpx.URL(url).host != "127.0.0.1":
            self.deliveries.append(("refused: not 127.0.0.1", url, None))
            return
        sent_logs = ""
        with httpx.Client(timeout=10, trust_env=False) as http:

            def post(event: str, prediction: dict[str, Any]) -> None:
                if self.script.webhooks_lost or (
                    event not in job.events and event not in ("start", "completed")
                ):
                    return
                body = json.dumps(prediction).encode()
                webhook_id = f"msg_{uuid.uuid4().hex}"
                stamp = int(time.time())
                secret = self.script.webhook_signing or self.signing_secret
                headers = {
                    "Content-Type": "application/json",
                    "webhook-id": webhook_id,
                    "webhook-timestamp": str(stamp),
                    "webhook-signature": sign_delivery(secret, webhook_id, stamp, body),
                }
                try:
                    answered: int | None = http.post(url, content=body, headers=headers).status_code
                except httpx.HTTPError:
                    answered = None
                self.deliveries.append((event, str(prediction["status"]), answered))

            post("start", {**self.prediction(job), "status": "starting"})
            while True:
                time.sleep(0.1)
                prediction = self.prediction(job)
                if prediction["status"] not in ("starting", "processing"):
                    post("completed", prediction)
                    return
                if prediction["logs"] != sent_logs:
                    sent_logs = prediction["logs"]
                    post("logs", prediction)
                    time.sleep(0.2)

    # Models GET /v1/models/{owner}/{name} knows (the others are 404 "Not found.").
    models: tuple[str, ...] = ("black-forest-labs/flux-schnell",)

    def version(self) -> dict[str, Any]:
        return {
            "id": FLUX_VERSION,
            "created_at": "2026-08-01T10:00:00.000Z",
            "cog_version": "0.9.4",
            "openapi_schema": flux_openapi_schema(),
        }

    def model(self, name: str) -> dict[str, Any]:
        owner, _, short = name.partition("/")
        return {
            "url": f"https://replicate.com/{name}",
            "owner": owner,
            "name": short,
            "description": "The fastest image generation model tailored for local development",
            "visibility": "public",
            "run_count": 1000,
            "latest_version": self.version(),
        }

    def prediction(self, job: Job) -> dict[str, Any]:
        status = "processing"
        output: Any = None
        error = None
        percent = round(self.fraction(job) * 100)
        logs = f"Using seed: 42\n{percent:3d}%|{'#' * (percent // 10):<10}| {percent // 5}/20\n"
        if job.cancelled:
            status = "canceled"
        elif self.done(job):
            if job.error or self.script.fail:
                status, error = "failed", job.error or self.script.fail
            else:
                status = "succeeded"
                if self.output_of(job) == "text":
                    output = ["Once ", "upon ", "a time"]
                else:
                    output = self.file_output(job)
        base = f"{self.url}/v1/predictions/{job.id}"
        return {
            "id": job.id,
            "model": job.model,
            "version": FLUX_VERSION,
            "input": job.input,
            "logs": logs,
            "output": output,
            "error": error,
            "status": status,
            "created_at": "2026-11-25T12:00:00.000Z",
            "urls": {"get": base, "cancel": base + "/cancel"},
            "metrics": {"predict_time": self.script.seconds} if status == "succeeded" else {},
        }

    FILE_MAX = 100 * 1024 * 1024  # "files up to 100MB" (Replicate's input-files guide)

    def file_object(self, file_id: str) -> dict[str, Any]:
        name, content_type, data = self.uploads[file_id]
        return {
            "id": file_id,
            "name": name,
            "content_type": content_type,
            "size": len(data),
            "etag": hashlib.md5(data).hexdigest(),
            "checksums": {
                "sha256": hashlib.sha256(data).hexdigest(),
                "md5": hashlib.md5(data).hexdigest(),
            },
            "metadata": {},
            "created_at": "2026-11-25T12:00:00.000Z",
            "expires_at": "2026-11-26T12:00:00.000Z",
            "urls": {"get": f"{self.url}/v1/files/{file_id}"},
        }

    def create_file(self, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        """``POST /v1/files``: multipart/form-data with the file in the ``content`` part."""
        content_type = headers.get("Content-Type", "")
        if not content_type.startswith("multipart/form-data") or not isinstance(body, bytes):
            return 415, {"detail": "Unsupported media type: send multipart/form-data"}
        parts = multipart_parts(content_type, body)
        found = next((p for p in parts if p[0] == "content"), None)
        if found is None:
            return 400, {"detail": "content: This field is required."}
        _, filename, part_type, data = found
        if len(data) > self.FILE_MAX:
            return 413, {"detail": "File too large"}
        file_id = uuid.uuid4().hex[:12]
        self.uploads[file_id] = (filename or "file", part_type, data)
        return 201, self.file_object(file_id)

    def route(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        path = path.split("?")[0]
        if path == "/v1/files" and method == "POST":
            return self.create_file(body, headers)
        found = re.fullmatch(r"/v1/files/([^/]+)", path)
        if found and method == "GET":
            if found.group(1) not in self.uploads:
                return 404, {"detail": "Not found."}
            return 200, self.file_object(found.group(1))
        if method == "GET" and path == "/v1/account":
            return 200, {"type": "user", "username": "fakeuser", "name": "Fake User"}
        if method == "GET" and path == "/v1/webhooks/default/secret" and self.script.webhooks:
            return 200, {"key": self.signing_secret}
        found = re.fullmatch(r"/v1/models/([^/]+/[^/]+)(/versions/([^/]+))?", path)
        if method == "GET" and found and found.group(1) in self.models:
            time.sleep(self.script.model_delay)
            if found.group(2) is None:
                return 200, self.model(found.group(1))
            if found.group(3) == FLUX_VERSION:
                return 200, self.version()
        if method == "POST" and (
            path == "/v1/predictions" or re.fullmatch(r"/v1/models/[^/]+/[^/]+/predictions", path)
        ):
            if not isinstance(body, dict) or not isinstance(body.get("input"), dict):
                return 422, {"detail": "input is required", "status": 422}
            refused = self.input_problem(body["input"])
            if refused is not None:
                return refused
            model = body.get("version") or path.split("/")[3] + "/" + path.split("/")[4]
            job = self.new_job(str(model), body["input"])
            missing = self.unfetchable(body["input"])
            if missing is not None:
                job.error = f"Failed to download input file {missing}: 404 Not Found"
            if isinstance(body.get("webhook"), str):
                job.webhook = body["webhook"]
                job.events = tuple(body.get("webhook_events_filter") or ())
                threading.Thread(target=self.send_webhooks, args=(job,), daemon=True).start()
            wait = re.fullmatch(r"wait(=(\d+))?", headers.get("Prefer", ""))
            if wait:
                limit = float(wait.group(2) or 60)
                while not self.done(job) and time.monotonic() - job.started < limit:
                    time.sleep(0.05)
            return 201, self.prediction(job)
        found = re.fullmatch(r"/v1/predictions/([^/]+)(/cancel)?", path)
        if found and found.group(1) in self.jobs:
            job = self.jobs[found.group(1)]
            if found.group(2):
                if method != "POST":
                    return 405, {"detail": "Method not allowed"}
                self.cancels.append(job.id)
                if not self.done(job):
                    job.cancelled = True
                return 200, self.prediction(job)
            return 200, self.prediction(job)
        return 404, {"detail": "Not found."}


def fal_flux_openapi() -> dict[str, Any]:
    """The OpenAPI document fal publishes for one endpoint (abridged from fal-ai/flux/dev):
    the queue submission's body and the result's answer are named components, the fields'
    order is ``x-fal-order-properties``, an enum sits behind ``anyOf`` and a ``$ref``."""
    model = "fal-ai/flux/dev"
    ref = "#/components/schemas/"
    return {
        "openapi": "3.0.4",
        "info": {"title": "Queue OpenAPI for fal-ai/flux/dev", "version": "1.0.0"},
        "paths": {
            f"/{model}/requests/{{request_id}}/status": {
                "get": {"responses": {"200": {"description": "The request status."}}}
            },
            f"/{model}": {
                "post": {
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"$ref": ref + "FluxDevInput"}}},
                    },
                    "responses": {"200": {"description": "The request status."}},
                }
            },
            f"/{model}/requests/{{request_id}}": {
                "get": {
                    "responses": {
                        "200": {
                            "description": "Result of the request.",
                            "content": {
                                "application/json": {"schema": {"$ref": ref + "FluxDevOutput"}}
                            },
                        }
                    }
                }
            },
        },
        "components": {
            "schemas": {
                "FluxDevInput": {
                    "title": "BaseInput",
                    "type": "object",
                    "required": ["prompt"],
                    "x-fal-order-properties": ["prompt", "image_size", "num_inference_steps"],
                    "properties": {
                        "num_inference_steps": {
                            "title": "Num Inference Steps",
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 50,
                            "default": 28,
                        },
                        "prompt": {
                            "title": "Prompt",
                            "type": "string",
                            "description": "The prompt to generate an image from.",
                        },
                        "image_size": {
                            "title": "Image Size",
                            "default": "landscape_4_3",
                            "anyOf": [
                                {"$ref": ref + "ImageSize"},
                                {"enum": ["square_hd", "landscape_4_3"], "type": "string"},
                            ],
                        },
                    },
                },
                "ImageSize": {
                    "title": "ImageSize",
                    "type": "object",
                    "properties": {"width": {"type": "integer"}, "height": {"type": "integer"}},
                },
                "FluxDevOutput": {
                    "title": "Output",
                    "type": "object",
                    "properties": {
                        "images": {"type": "array", "items": {"$ref": ref + "Image"}},
                        "seed": {"type": "integer"},
                    },
                },
                "Image": {
                    "type": "object",
                    "properties": {"url": {"type": "string"}, "width": {"type": "integer"}},
                },
            }
        },
    }


class FakeFal(_Fake):
    token_header = f"Key {FAL_KEY}"
    # Uploads initiated and not yet PUT: id -> (name, content type).
    pending: dict[str, tuple[str, str]]

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.pending = {}

    # Endpoints the platform API (GET /v1/models) describes; the others are not found.
    models: tuple[str, ...] = ("fal-ai/flux/dev",)

    def platform(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        """fal's platform API: pricing (needs the key) and the model search."""
        ids = [i for value in query.get("endpoint_id", []) for i in value.split(",")]
        if path == "/v1/models/pricing":
            if not ids:
                return 400, {"error": {"type": "validation_error", "message": "endpoint_id"}}
            return 200, {
                "prices": [
                    {"endpoint_id": i, "unit_price": 0.025, "unit": "image", "currency": "USD"}
                    for i in ids
                ],
                "next_cursor": None,
                "has_more": False,
            }
        expand = "openapi-3.0" in query.get("expand", [])
        found = [
            {
                "endpoint_id": i,
                "metadata": {
                    "display_name": "FLUX.1 [dev]",
                    "category": "text-to-image",
                    "description": "FLUX.1 [dev], a 12 billion parameter flow transformer",
                    "status": "active",
                },
                **({"openapi": fal_flux_openapi()} if expand else {}),
            }
            for i in ids
            if i in self.models
        ]
        return 200, {"models": found, "next_cursor": None, "has_more": False}

    def result(self, job: Job) -> Any:
        url = self.output_url(job)
        kind = self.output_of(job)
        if kind in ("image", "jpeg", "big"):
            ctype = self.files[kind][0] if kind in self.files else "image/png"
            return {"images": [{"url": url, "content_type": ctype, "width": 40, "height": 30}]}
        if kind == "video":
            return {"video": {"url": url, "content_type": "video/mp4"}}
        if kind == "text":
            return {"output": "Once upon a time"}
        return {"audio_file": {"url": url, "content_type": self.files[kind][0]}}

    def initiate_upload(self, query: str, body: Any) -> tuple[int, Any]:
        """fal's storage: ``POST /storage/upload/initiate?storage_type=gcs`` with
        ``{file_name, content_type}`` answers a signed ``upload_url`` (for one PUT of that
        content type) and the ``file_url`` the file will be read at."""
        if urllib.parse.parse_qs(query).get("storage_type") != ["gcs"]:
            return 400, {"detail": "storage_type: unsupported"}
        if not isinstance(body, dict) or not all(
            isinstance(body.get(k), str) and body.get(k) for k in ("file_name", "content_type")
        ):
            return 422, {
                "detail": [
                    {"loc": ["body", "file_name"], "msg": "field required", "type": "missing"}
                ]
            }
        file_id = uuid.uuid4().hex[:12]
        name = urllib.parse.quote(body["file_name"])
        self.pending[file_id] = (body["file_name"], body["content_type"])
        signature = hashlib.sha256(f"{file_id}:{body['content_type']}".encode()).hexdigest()
        return 200, {
            "upload_url": f"{self.url}/gcs/upload/{file_id}?X-Goog-Signature={signature}",
            "file_url": f"{self.url}/gcs/files/{file_id}/{name}",
        }

    def open_route(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, Any, dict[str, str]] | None:
        """The signed storage URLs: the PUT of an upload, the GET of a stored file."""
        found = re.fullmatch(r"/gcs/(upload|files)/([^/?]+)(?:/[^?]*)?(\?.*)?", path)
        if found is None:
            return None
        kind, file_id = found.group(1), found.group(2)
        if kind == "files":
            if method != "GET" or file_id not in self.uploads:
                return 404, b"Not Found", {"Content-Type": "text/plain"}
            _, content_type, data = self.uploads[file_id]
            return 200, data, {"Content-Type": content_type}
        if method != "PUT" or file_id not in self.pending:
            return 404, b"Not Found", {"Content-Type": "text/plain"}
        if "Authorization" in headers:  # a signed URL takes no other credential
            return 400, b"InvalidAuthenticationInfo", {"Content-Type": "application/xml"}
        name, content_type = self.pending[file_id]
        if headers.get("Content-Type") != content_type:
            return 403, b"SignatureDoesNotMatch", {"Content-Type": "application/xml"}
        self.uploads[file_id] = (name, content_type, raw)
        del self.pending[file_id]
        return 200, b"", {}

    def route(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        path, _, query = path.partition("?")
        if method == "POST" and path == "/storage/upload/initiate":
            return self.initiate_upload(query, body)
        if method == "GET" and path in ("/v1/models", "/v1/models/pricing"):
            time.sleep(self.script.model_delay)
            return self.platform(path, urllib.parse.parse_qs(query))
        found = re.fullmatch(r"/([^/]+/[^/]+)/requests/([^/]+)(/status|/cancel)?", path)
        if found:
            job = self.jobs.get(found.group(2))
            if job is None:
                return 404, {"detail": "Request not found"}
            base = f"{self.url}/{found.group(1)}/requests/{job.id}"
            if found.group(3) == "/cancel":
                if method != "PUT":
                    return 405, {"detail": "Method not allowed"}
                self.cancels.append(job.id)
                if self.done(job):
                    return 400, {"status": "ALREADY_COMPLETED"}
                job.cancelled = True
                return 202, {"status": "CANCELLATION_REQUESTED"}
            if found.group(3) == "/status":
                if job.cancelled or self.done(job):
                    completed = {"status": "COMPLETED", "request_id": job.id, "response_url": base}
                    if self.script.fal_error_type and not self.script.fal_status_quiet:
                        completed["error"] = self.script.fail or "Internal Server Error"
                        completed["error_type"] = self.script.fal_error_type
                    return 200, completed
                percent = round(self.fraction(job) * 100)
                return 202, {
                    "status": "IN_PROGRESS",
                    "request_id": job.id,
                    "response_url": base,
                    "logs": [{"message": f"step {percent // 5}/20", "level": "INFO"}],
                }
            if job.cancelled:
                return 400, {"detail": "Request was cancelled"}
            if not self.done(job):
                return 400, {"detail": "Request is still in progress"}
            if job.error:
                return 422, {
                    "detail": [
                        {
                            "loc": ["body"],
                            "msg": job.error,
                            "type": "file_download_error",
                            "url": "https://docs.fal.ai/errors#file_download_error",
                        }
                    ]
                }
            if self.script.fal_error_type:
                detail = self.script.fail or "Internal Server Error"
                return 500, {"detail": detail, "error_type": self.script.fal_error_type}
            if self.script.fail:
                return 422, {"detail": [{"msg": self.script.fail, "type": "value_error"}]}
            return 200, self.result(job)
        if method == "POST" and re.fullmatch(r"/[\w.-]+(/[\w.-]+){1,4}", path):
            if not isinstance(body, dict):
                return 422, {"detail": "the body must be a JSON object"}
            refused = self.input_problem(body)
            if refused is not None:
                return refused
            model = path.lstrip("/")
            job = self.new_job(model, body)
            missing = self.unfetchable(body)
            if missing is not None:
                job.error = f"Failed to download the file at {missing}"
            app = "/".join(model.split("/")[:2])
            base = f"{self.url}/{app}/requests/{job.id}"
            return 200, {
                "request_id": job.id,
                "response_url": base,
                "status_url": base + "/status",
                "cancel_url": base + "/cancel",
                "queue_position": 0,
            }
        return 404, {"detail": "Not found"}
