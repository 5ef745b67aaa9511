"""A small REAL ComfyUI server on 127.0.0.1 (HTTP and WebSocket, Starlette under uvicorn in
a thread of its own), speaking the protocol of ComfyUI's server: ``POST /prompt`` (with an
optional caller ``prompt_id``), ``GET /ws?clientId=`` messages, ``GET /history/{id}``,
``GET /queue``, ``POST /queue {"delete"}``, ``POST /interrupt``, ``POST /upload/image``,
``GET /view``. Prompts run one at a time: each node in id order sends ``executing``; a
``KSampler`` sends ``progress`` for ``steps`` steps ``step_seconds`` apart; ``SaveImage`` /
``PreviewImage`` save a real PNG (Pillow) sized by the ``EmptyLatentImage`` or the uploaded
``LoadImage`` image. A node of class ``Explode`` fails with an ``execution_error``.

It counts what a test checks: submissions, interrupts, queue deletes, uploads, and the
``Authorization`` header of every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import io
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.server import free_port

KNOWN = {
    "CheckpointLoaderSimple",
    "CLIPTextEncode",
    "EmptyLatentImage",
    "KSampler",
    "VAEDecode",
    "VAEEncode",
    "LoadImage",
    "SaveImage",
    "PreviewImage",
    "Explode",
}
OUTPUTS = {"SaveImage", "PreviewImage"}


@dataclass
class FakeComfyUI:
    steps: int = 4
    step_seconds: float = 0.05
    token: str | None = None  # the bearer token it requires, if any
    port: int = field(default_factory=free_port)
    submissions: list[dict[str, Any]] = field(default_factory=list)
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    uploads: dict[str, bytes] = field(default_factory=dict)
    authorizations: list[str | None] = field(default_factory=list)
    history: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    started: threading.Event = field(default_factory=threading.Event)
    # (prompt id, prompt, client id), in queue order; the first one runs.
    _queue: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    _sockets: dict[str, WebSocket] = field(default_factory=dict)
    _interrupted: set[str] = field(default_factory=set)
    _running: str | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _wake: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> str | None:
        return self._running

    def wait_running(self, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while self._running is None:
            if time.monotonic() > deadline:
                raise AssertionError("no prompt started on the fake ComfyUI")
            time.sleep(0.01)
        return self._running

    # ------------------------------------------------------------------ HTTP

    def _authorized(self, request: Request | WebSocket) -> bool:
        header = request.headers.get("authorization")
        self.authorizations.append(header)
        return self.token is None or header == f"Bearer {self.token}"

    async def prompt(self, request: Request) -> Response:
        if not self._authorized(request):
            return JSONResponse({"error": "unauthorized"}, 401)
        body = await request.json()
        prompt = body.get("prompt")
        if not isinstance(prompt, dict):
            return JSONResponse({"error": {"type": "no_prompt", "message": "No prompt"}}, 400)
        node_errors = {
            node_id: {
                "errors": [{"message": "unknown node", "details": f"{node.get('class_type')}"}],
                "class_type": node.get("class_type"),
            }
            for node_id, node in prompt.items()
            if node.get("class_type") not in KNOWN
        }
        if node_errors:
            error = {
                "type": "prompt_outputs_failed_validation",
                "message": "Prompt outputs failed validation",
                "details": "",
            }
            return JSONResponse({"error": error, "node_errors": node_errors}, 400)
        prompt_id = str(body.get("prompt_id") or uuid.uuid4())
        self.submissions.append(body)
        self._queue.append((prompt_id, prompt, str(body.get("client_id", ""))))
        assert self._wake is not None
        self._wake.set()
        return JSONResponse({"prompt_id": prompt_id, "number": len(self.submissions)})

    async def get_history(self, request: Request) -> Response:
        self._authorized(request)
        prompt_id = request.path_params["prompt_id"]
        entry = self.history.get(prompt_id)
        return JSONResponse({prompt_id: entry} if entry else {})

    async def queue(self, request: Request) -> Response:
        if not self._authorized(request):
            return JSONResponse({"error": "unauthorized"}, 401)
        if request.method == "POST":
            body = await request.json()
            for prompt_id in body.get("delete") or []:
                self.deletes.append(prompt_id)
                self._queue = [q for q in self._queue if q[0] != prompt_id or q[0] == self._running]
            return Response(status_code=200)
        items = [[i, q[0], q[1], {"client_id": q[2]}, []] for i, q in enumerate(self._queue)]
        running = [i for i in items if i[1] == self._running]
        pending = [i for i in items if i[1] != self._running]
        return JSONResponse({"queue_running": running, "queue_pending": pending})

    async def interrupt(self, request: Request) -> Response:
        self._authorized(request)
        body = await request.json() if await request.body() else {}
        self.interrupts.append(body)
        target = body.get("prompt_id")
        if self._running is not None and target in (None, self._running):
            self._interrupted.add(self._running)
        return Response(status_code=200)

    async def upload(self, request: Request) -> Response:
        if not self._authorized(request):
            return JSONResponse({"error": "unauthorized"}, 401)
        parts = _multipart(request.headers["content-type"], await request.body())
        name, data = parts["image"]
        assert parts["type"][1] == b"input" and parts["overwrite"][1] == b"true", parts
        self.uploads[name] = data
        return JSONResponse({"name": name, "subfolder": "", "type": "input"})

    async def system_stats(self, request: Request) -> Response:
        if not self._authorized(request):
            return JSONResponse({"error": "invalid token"}, 401)
        devices = [{"name": "cuda:0 NVIDIA GeForce RTX 4090", "type": "cuda", "index": 0}]
        return JSONResponse({"system": {"os": "posix"}, "devices": devices})

    async def view(self, request: Request) -> Response:
        self._authorized(request)
        name = request.query_params.get("filename", "")
        if name not in self.files:
            return JSONResponse({"error": "not found"}, 404)
        return Response(self.files[name], media_type="image/png")

    async def ws(self, websocket: WebSocket) -> None:
        if not self._authorized(websocket):
            await websocket.close(code=1008)
            return
        client_id = websocket.query_params.get("clientId", uuid.uuid4().hex)
        await websocket.accept()
        self._sockets[client_id] = websocket
        await websocket.send_json(
            {"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}}}}
        )
        try:
            while True:
                await websocket.receive_text()
        except WebSocketDisconnect:
            pass
        finally:
            if self._sockets.get(client_id) is websocket:
                del self._sockets[client_id]

    # ------------------------------------------------------------------ execution

    async def _send(self, client_id: str, kind: str, data: dict[str, Any]) -> None:
        socket = self._sockets.get(client_id)
        if socket is not None:
            with contextlib.suppress(Exception):
                await socket.send_json({"type": kind, "data": data})

    async def _worker(self) -> None:
        assert self._wake is not None
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            prompt_id, prompt, client_id = self._queue[0]
            self._running = prompt_id
            try:
                await self._execute(prompt_id, prompt, client_id)
            finally:
                self._queue = [q for q in self._queue if q[0] != prompt_id]
                self._running = None

    async def _execute(self, prompt_id: str, prompt: dict[str, Any], client_id: str) -> None:
        base = {"prompt_id": prompt_id}
        await self._send(client_id, "execution_start", {**base, "timestamp": 0})
        await self._send(client_id, "execution_cached", {**base, "nodes": []})
        outputs: dict[str, Any] = {}
        for node_id in sorted(prompt, key=lambda k: (len(k), k)):
            node = prompt[node_id]
            await self._send(client_id, "executing", {**base, "node": node_id})
            kind = node["class_type"]
            if kind == "Explode":
                error = {
                    **base,
                    "node_id": node_id,
                    "node_type": kind,
                    "exception_type": "torch.OutOfMemoryError",
                    "exception_message": "CUDA out of memory. Tried to allocate 20.00 GiB",
                    "traceback": [],
                }
                await self._send(client_id, "execution_error", error)
                self._finish(prompt_id, prompt, {}, "error", [["execution_error", error]])
                return
            if kind == "LoadImage" and node["inputs"].get("image") not in self.uploads:
                error = {
                    **base,
                    "node_id": node_id,
                    "node_type": kind,
                    "exception_type": "FileNotFoundError",
                    "exception_message": f"Invalid image file: {node['inputs'].get('image')}",
                }
                await self._send(client_id, "execution_error", error)
                self._finish(prompt_id, prompt, {}, "error", [["execution_error", error]])
                return
            if kind == "KSampler":
                for step in range(1, self.steps + 1):
                    await asyncio.sleep(self.step_seconds)
                    if prompt_id in self._interrupted:
                        await self._send(
                            client_id,
                            "execution_interrupted",
                            {**base, "node_id": node_id, "node_type": kind, "executed": []},
                        )
                        interrupted = ["execution_interrupted", {**base}]
                        self._finish(prompt_id, prompt, {}, "error", [interrupted])
                        return
                    progress = {**base, "value": step, "max": self.steps, "node": node_id}
                    await self._send(client_id, "progress", progress)
            if kind in OUTPUTS:
                name = f"ComfyUI_{len(self.files):05d}_.png"
                self.files[name] = _png(*_size(prompt, self.uploads))
                images = [{"filename": name, "subfolder": "", "type": "output"}]
                outputs[node_id] = {"images": images}
                await self._send(
                    client_id, "executed", {**base, "node": node_id, "output": {"images": images}}
                )
        self._finish(prompt_id, prompt, outputs, "success", [])
        await self._send(client_id, "executing", {**base, "node": None})
        await self._send(client_id, "execution_success", base)

    def _finish(
        self,
        prompt_id: str,
        prompt: dict[str, Any],
        outputs: dict[str, Any],
        status: str,
        messages: list[Any],
    ) -> None:
        self.history[prompt_id] = {
            "prompt": [0, prompt_id, prompt, {}, list(outputs)],
            "outputs": outputs,
            "status": {
                "status_str": status,
                "completed": status == "success",
                "messages": messages,
            },
        }

    # ------------------------------------------------------------------ lifecycle

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            worker = asyncio.create_task(self._worker())
            self.started.set()
            yield
            worker.cancel()

        return Starlette(
            routes=[
                Route("/prompt", self.prompt, methods=["POST"]),
                Route("/history/{prompt_id}", self.get_history),
                Route("/queue", self.queue, methods=["GET", "POST"]),
                Route("/interrupt", self.interrupt, methods=["POST"]),
                Route("/upload/image", self.upload, methods=["POST"]),
                Route("/view", self.view),
                Route("/system_stats", self.system_stats),
                WebSocketRoute("/ws", self.ws),
            ],
            lifespan=lifespan,
        )


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str, bytes]]:
    """A multipart/form-data body: field name -> (file name or "", bytes)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    assert message.is_multipart(), content_type
    fields: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        fields[str(name)] = (
            part.get_filename() or "",
            payload if isinstance(payload, bytes) else b"",
        )
    return fields


def _size(prompt: dict[str, Any], uploads: dict[str, bytes]) -> tuple[int, int]:
    for node in prompt.values():
        if node["class_type"] == "LoadImage":
            with Image.open(io.BytesIO(uploads[node["inputs"]["image"]])) as image:
                return image.size
    for node in prompt.values():
        if node["class_type"] == "EmptyLatentImage":
            return int(node["inputs"]["width"]), int(node["inputs"]["height"])
    return 64, 64


def _png(width: int, height: int) -> bytes:
    """A real PNG of noise (it does not compress: its size is about 3 bytes a pixel)."""
    buffer = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(
        buffer, format="PNG"
    )
    return buffer.getvalue()


@contextlib.contextmanager
def running(fake: FakeComfyUI) -> Iterator[FakeComfyUI]:
    """``fake`` served on 127.0.0.1 in a thread of its own until the block ends."""
    config = uvicorn.Config(
        fake.app(), host="127.0.0.1", port=fake.port, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        if not fake.started.wait(10):
            raise AssertionError("the fake ComfyUI did not start")
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                raise AssertionError("the fake ComfyUI did not listen")
            time.sleep(0.01)
        yield fake
    finally:
        server.should_exit = True
        thread.join(10)


SDXL_WORKFLOW: dict[str, Any] = {
    "3": {
        "class_type": "KSampler",
        "inputs": {
            "seed": 156680208700286,
            "steps": 20,
            "cfg": 8,
            "sampler_name": "euler",
            "scheduler": "normal",
            "denoise": 1,
            "model": ["4", 0],
            "positive": ["6", 0],
            "negative": ["7", 0],
            "latent_image": ["5", 0],
        },
    },
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sdxl.safetensors"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 96, "height": 64, "batch_size": 1}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a lighthouse", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "ComfyUI", "images": ["8", 0]}},
}
