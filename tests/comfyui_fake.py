"""A small REAL ComfyUI server on 127.0.0.1 (HTTP and WebSocket, Starlette under uvicorn in
a thread of its own), speaking the protocol of ComfyUI's server: ``POST /prompt`` (with an
optional caller ``prompt_id``), ``GET /ws?clientId=`` messages, ``GET /history/{id}``,
``GET /queue``, ``POST /queue {"delete"}``, ``POST /interrupt``, ``POST /upload/image``,
``GET /view``. Prompts run one at a time: each node in id order sends ``executing``; a
``KSampler`` sends ``progress`` for ``steps`` steps ``step_seconds`` apart; ``SaveImage`` /
``PreviewImage`` save a real PNG (Pillow) sized by the ``EmptyLatentImage`` or the uploaded
``LoadImage`` image. A node of class ``Explode`` fails with an ``execution_error``. Video and
sound are saved as ComfyUI's nodes save them, real files made with PyAV and Pillow, under
the history key each uses: ``VHS_VideoCombine`` (VideoHelperSuite) lists an H.264 MP4, a
GIF or an animated WebP (its ``format``) under ``gifs``; core ``SaveVideo`` an MP4 and
``SaveAnimatedWEBP`` a WebP under ``images`` with ``animated: [true]``; ``SaveAudio`` a FLAC
and ``SaveAudioMP3`` an MP3 under ``audio``.

It counts what a test checks: submissions, interrupts, queue deletes, uploads, and the
``Authorization`` header of every request. ``hold`` keeps a ``POST /prompt`` waiting, before
the prompt is queued, until the test sets it (``received`` says one arrived).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import functools
import io
import mimetypes
import os
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import uvicorn
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from nodeloom.nodes import media
from nodeloom.settings import Settings
from tests.server import free_port

KNOWN = {
    "CheckpointLoaderSimple",
    "EmptyImage",
    "CLIPTextEncode",
    "EmptyLatentImage",
    "KSampler",
    "VAEDecode",
    "VAEEncode",
    "LoadImage",
    "SaveImage",
    "PreviewImage",
    "Explode",
    "UNETLoader",
    "CLIPLoader",
    "VAELoader",
    "ModelSamplingSD3",
    "EmptyHunyuanLatentVideo",
    "CreateVideo",
    "SaveVideo",
    "SaveAnimatedWEBP",
    "VHS_VideoCombine",
    "EmptyLatentAudio",
    "VAEDecodeAudio",
    "SaveAudio",
    "SaveAudioMP3",
}
OUTPUTS = {"SaveImage", "PreviewImage"}
# Nodes ComfyUI runs a prompt for (OUTPUT_NODE = True): what its validation starts from.
OUTPUT_NODES = OUTPUTS | {
    "SaveVideo",
    "SaveAnimatedWEBP",
    "VHS_VideoCombine",
    "SaveAudio",
    "SaveAudioMP3",
}
# Some core nodes' required inputs, as their INPUT_TYPES declare them: a prompt leaving
# one out is refused as ComfyUI refuses it (``required_input_missing``).
REQUIRED = {
    "KSampler": (
        "model",
        "seed",
        "steps",
        "cfg",
        "sampler_name",
        "scheduler",
        "positive",
        "negative",
        "latent_image",
        "denoise",
    ),
    "EmptyLatentImage": ("width", "height", "batch_size"),
    "EmptyImage": ("width", "height", "batch_size", "color"),
    "CLIPTextEncode": ("text", "clip"),
    "VAEDecode": ("samples", "vae"),
}
# Loaders' model inputs: a combo of the files in a models folder, as /object_info lists them.
MODEL_INPUTS = {
    "CheckpointLoaderSimple": ("ckpt_name", "checkpoints"),
    "UNETLoader": ("unet_name", "diffusion_models"),
    "CLIPLoader": ("clip_name", "text_encoders"),
    "VAELoader": ("vae_name", "vae"),
}
# What a fake server has unless a test says otherwise: the sample workflows' models.
MODELS: dict[str, tuple[str, ...]] = {
    "checkpoints": (
        "sdxl.safetensors",
        "sd_xl_base_1.0.safetensors",
        "stable-audio-open-1.0.safetensors",
    ),
    "diffusion_models": ("wan2.1_t2v_1.3B_fp16.safetensors",),
    "text_encoders": ("umt5_xxl_fp8_e4m3fn_scaled.safetensors", "t5_base.safetensors"),
    "vae": ("wan_2.1_vae.safetensors",),
}
VIDEO_FPS, VIDEO_FRAMES, VIDEO_SIZE = 8, 16, (64, 48)  # a 2-second clip
AUDIO_SECONDS = 1.0


def validate_prompt(
    prompt: dict[str, Any],
    classes: frozenset[str] | set[str] = frozenset(KNOWN),
    models: dict[str, tuple[str, ...]] = MODELS,
) -> tuple[bool, dict[str, Any]]:
    """Whether ComfyUI takes a prompt, and what its server answers about it, field by field
    (``execution.validate_prompt``): an unknown class stops at once (``invalid_prompt``, no
    node errors); otherwise each output node's inputs are checked back through its links,
    every node with errors listed under ``node_errors``. With no output left valid that is
    the 400 answer (the top ``details`` joining the output nodes' own errors only); else
    the prompt is taken and its 200 answer carries ``node_errors`` (the outputs left out).
    A loader's model file that is not among the server's (``models``) is a
    ``value_not_in_list`` error, as for any combo input."""
    for node_id, node in prompt.items():
        class_type = node.get("class_type") if isinstance(node, dict) else None
        if class_type not in classes:
            return False, {
                "error": {
                    "type": "invalid_prompt",
                    "message": f"Cannot execute because node {class_type} does not exist.",
                    "details": f"Node ID '#{node_id}'",
                    "extra_info": {},
                },
                "node_errors": {},
            }
    outputs = sorted(i for i, node in prompt.items() if node["class_type"] in OUTPUT_NODES)
    node_errors: dict[str, dict[str, Any]] = {}
    good = 0
    for output in outputs:
        seen: set[str] = set()
        stack = [output]
        failed = False
        while stack:
            node_id = stack.pop()
            if node_id in seen or node_id not in prompt:
                continue
            seen.add(node_id)
            node = prompt[node_id]
            inputs = node.get("inputs") or {}
            errors = [
                {
                    "type": "required_input_missing",
                    "message": "Required input is missing",
                    "details": name,
                    "extra_info": {"input_name": name},
                }
                for name in REQUIRED.get(node["class_type"], ())
                if name not in inputs
            ]
            if node["class_type"] in MODEL_INPUTS:
                name, folder = MODEL_INPUTS[node["class_type"]]
                value, options = inputs.get(name), list(models.get(folder, ()))
                if isinstance(value, str) and value not in options:
                    errors.append(
                        {
                            "type": "value_not_in_list",
                            "message": "Value not in list",
                            "details": f"{name}: '{value}' not in {options}",
                            "extra_info": {
                                "input_name": name,
                                "input_config": [options, {}],
                                "received_value": value,
                            },
                        }
                    )
            if errors:
                failed = True
                entry = node_errors.setdefault(
                    node_id,
                    {"errors": errors, "dependent_outputs": [], "class_type": node["class_type"]},
                )
                entry["dependent_outputs"].append(output)
            stack.extend(str(v[0]) for v in inputs.values() if isinstance(v, list) and len(v) == 2)
        good += not failed
    if good or not node_errors:
        return True, {"node_errors": node_errors}
    # Only an output node's own errors reach the top details (a node before it that fails
    # leaves the output invalid with no reason of its own).
    lines = [
        f"{e['message']}: {e['details']}"
        for output in outputs
        for e in node_errors.get(output, {}).get("errors", [])
    ]
    return False, {
        "error": {
            "type": "prompt_outputs_failed_validation",
            "message": "Prompt outputs failed validation",
            "details": "\n".join(lines),
            "extra_info": {},
        },
        "node_errors": node_errors,
    }


@dataclass
class FakeComfyUI:
    steps: int = 4
    step_seconds: float = 0.05
    token: str | None = None  # the bearer token it requires, if any
    classes: set[str] = field(default_factory=lambda: set(KNOWN))  # its node types
    models: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(MODELS))
    port: int = field(default_factory=free_port)
    submissions: list[dict[str, Any]] = field(default_factory=list)
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    uploads: dict[str, bytes] = field(default_factory=dict)
    authorizations: list[str | None] = field(default_factory=list)
    history: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    started: threading.Event = field(default_factory=threading.Event)
    hold: threading.Event | None = None
    received: threading.Event = field(default_factory=threading.Event)
    # (prompt id, prompt, client id), in queue order; the first one runs.
    _queue: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    _sockets: dict[str, WebSocket] = field(default_factory=dict)
    _interrupted: set[str] = field(default_factory=set)
    _running: str | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _server: uvicorn.Server | None = None
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

    def kill(self) -> None:
        """Stop answering at once, as a server that crashed or lost its network: the port
        closes, WebSockets drop, the prompts it held are lost."""
        assert self._server is not None
        self._server.should_exit = True
        self._server.force_exit = True

    # ------------------------------------------------------------------ HTTP

    async def object_info(self, request: Request) -> Response:
        """Its node types as ComfyUI describes them; a loader's model input is a combo of
        the files in its models folder."""
        self._authorized(request)
        info: dict[str, Any] = {}
        for kind in sorted(self.classes):
            required: dict[str, Any] = {name: ["*", {}] for name in REQUIRED.get(kind, ())}
            if kind in MODEL_INPUTS:
                name, folder = MODEL_INPUTS[kind]
                options = list(self.models.get(folder, ()))
                required[name] = [options, {"tooltip": f"The name of the {folder} file."}]
            info[kind] = {
                "input": {"required": required, "optional": {}},
                "input_order": {"required": list(required)},
                "output": [],
                "output_is_list": [],
                "output_name": [],
                "name": kind,
                "display_name": kind,
                "description": "",
                "python_module": "nodes",
                "category": "loaders" if kind in MODEL_INPUTS else "sampling",
                "output_node": kind in OUTPUT_NODES,
            }
        return JSONResponse(info)

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
        taken, validation = validate_prompt(prompt, self.classes, self.models)
        if not taken:
            return JSONResponse(validation, 400)
        self.received.set()
        if self.hold is not None:
            await asyncio.to_thread(self.hold.wait, 30)
        prompt_id = str(body.get("prompt_id") or uuid.uuid4())
        self.submissions.append(body)
        self._queue.append((prompt_id, prompt, str(body.get("client_id", ""))))
        assert self._wake is not None
        self._wake.set()
        number = len(self.submissions)
        return JSONResponse({"prompt_id": prompt_id, "number": number, **validation})

    async def all_history(self, request: Request) -> Response:
        """``GET /history[?max_items=N]``: every finished prompt (the last N), by id."""
        self._authorized(request)
        items = list(self.history.items())
        most = request.query_params.get("max_items")
        if most is not None and most.isdigit():
            items = items[-int(most) :] if int(most) else []
        return JSONResponse(dict(items))

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
        media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Response(self.files[name], media_type=media_type)

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
        started = int(time.time() * 1000)  # ComfyUI's timestamps are Unix milliseconds
        await self._send(client_id, "execution_start", {**base, "timestamp": started})
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
            saved = await self._save(kind, node["inputs"], prompt)
            if saved is not None:
                outputs[node_id] = saved
                await self._send(client_id, "executed", {**base, "node": node_id, "output": saved})
        ended = int(time.time() * 1000)
        self._finish(
            prompt_id,
            prompt,
            outputs,
            "success",
            [
                ["execution_start", {**base, "timestamp": started}],
                ["execution_cached", {**base, "nodes": [], "timestamp": started}],
                ["execution_success", {**base, "timestamp": ended}],
            ],
        )
        await self._send(client_id, "executing", {**base, "node": None})
        await self._send(client_id, "execution_success", base)

    async def _save(
        self, kind: str, inputs: dict[str, Any], prompt: dict[str, Any]
    ) -> dict[str, Any] | None:
        """What an output node of class ``kind`` saves, as its history entry lists it."""
        if kind in OUTPUTS:
            png = await asyncio.to_thread(_png, *_size(prompt, self.uploads))
            return {"images": [self._file("png", png)]}
        if kind == "VHS_VideoCombine":
            fmt = str(inputs.get("format") or "video/h264-mp4")
            suffix = {"image/gif": "gif", "image/webp": "webp"}.get(fmt, "mp4")
            ref = self._file(suffix, await asyncio.to_thread(sample, suffix))
            return {"gifs": [{**ref, "format": fmt, "frame_rate": VIDEO_FPS}]}
        if kind in ("SaveVideo", "SaveAnimatedWEBP"):
            suffix = "mp4" if kind == "SaveVideo" else "webp"
            data = await asyncio.to_thread(sample, suffix)
            return {"images": [self._file(suffix, data)], "animated": [True]}
        if kind in ("SaveAudio", "SaveAudioMP3"):
            suffix = "flac" if kind == "SaveAudio" else "mp3"
            data = await asyncio.to_thread(sample, suffix)
            return {"audio": [self._file(suffix, data, subfolder="audio")]}
        return None

    def _file(self, suffix: str, data: bytes, subfolder: str = "") -> dict[str, Any]:
        name = f"ComfyUI_{len(self.files):05d}_.{suffix}"
        self.files[name] = data
        return {"filename": name, "subfolder": subfolder, "type": "output"}

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
                Route("/history", self.all_history),
                Route("/history/{prompt_id}", self.get_history),
                Route("/queue", self.queue, methods=["GET", "POST"]),
                Route("/interrupt", self.interrupt, methods=["POST"]),
                Route("/upload/image", self.upload, methods=["POST"]),
                Route("/view", self.view),
                Route("/system_stats", self.system_stats),
                Route("/object_info", self.object_info),
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


def _frames() -> list[Image.Image]:
    return [Image.new("RGB", VIDEO_SIZE, (i * 15 % 255, 90, 160)) for i in range(VIDEO_FRAMES)]


@functools.cache
def sample(suffix: str) -> bytes:
    """A real file of each kind a ComfyUI output node saves (made once per test process)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"sample.{suffix}"
        if suffix == "mp4":
            writer = media.VideoWriter(path, *VIDEO_SIZE, VIDEO_FPS)
            for frame in _frames():
                writer.write_image(frame)
            writer.close()
        elif suffix in ("gif", "webp"):
            frames = _frames()
            frames[0].save(
                path, save_all=True, append_images=frames[1:], duration=1000 // VIDEO_FPS, loop=0
            )
        elif suffix == "mp3":
            media.encode_mp3(_tone(media.SAMPLE_RATE, channels=2), path, Settings())
        else:
            _write_flac(path)
        return path.read_bytes()


def _tone(rate: int, channels: int = 1) -> Any:
    t = np.arange(round(rate * AUDIO_SECONDS), dtype=np.float32) / rate
    mono = (0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)
    return np.stack([mono] * channels)


def _write_flac(path: Path) -> None:
    rate = 44100
    with av.open(str(path), "w", format="flac") as out:
        stream = out.add_stream("flac", rate=rate, layout="mono")
        samples = (_tone(rate) * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


@contextlib.contextmanager
def running(fake: FakeComfyUI) -> Iterator[FakeComfyUI]:
    """``fake`` served on 127.0.0.1 in a thread of its own until the block ends."""
    config = uvicorn.Config(
        fake.app(), host="127.0.0.1", port=fake.port, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    fake._server = server
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


# Wan 2.1 text to video as Export (API) saves it, the frames saved by VideoHelperSuite.
VIDEO_WORKFLOW: dict[str, Any] = {
    "3": {
        "class_type": "KSampler",
        "inputs": {
            "seed": 82628696717253,
            "steps": 30,
            "cfg": 6,
            "sampler_name": "uni_pc",
            "scheduler": "simple",
            "denoise": 1,
            "model": ["48", 0],
            "positive": ["6", 0],
            "negative": ["7", 0],
            "latent_image": ["40", 0],
        },
    },
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a fox in snow", "clip": ["38", 0]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "static, blurry", "clip": ["38", 0]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["39", 0]}},
    "37": {
        "class_type": "UNETLoader",
        "inputs": {"unet_name": "wan2.1_t2v_1.3B_fp16.safetensors", "weight_dtype": "default"},
    },
    "38": {
        "class_type": "CLIPLoader",
        "inputs": {"clip_name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "type": "wan"},
    },
    "39": {"class_type": "VAELoader", "inputs": {"vae_name": "wan_2.1_vae.safetensors"}},
    "40": {
        "class_type": "EmptyHunyuanLatentVideo",
        "inputs": {"width": 832, "height": 480, "length": 33, "batch_size": 1},
    },
    "48": {"class_type": "ModelSamplingSD3", "inputs": {"shift": 8, "model": ["37", 0]}},
    "50": {
        "class_type": "VHS_VideoCombine",
        "inputs": {
            "frame_rate": 16,
            "loop_count": 0,
            "filename_prefix": "Wan",
            "format": "video/h264-mp4",
            "pix_fmt": "yuv420p",
            "crf": 19,
            "save_metadata": True,
            "pingpong": False,
            "save_output": True,
            "images": ["8", 0],
        },
    },
}

# Stable Audio Open as Export (API) saves it: a FLAC saved by SaveAudio.
AUDIO_WORKFLOW: dict[str, Any] = {
    "3": {
        "class_type": "KSampler",
        "inputs": {
            "seed": 840714208,
            "steps": 50,
            "cfg": 4.98,
            "sampler_name": "dpmpp_3m_sde_gpu",
            "scheduler": "exponential",
            "denoise": 1,
            "model": ["4", 0],
            "positive": ["6", 0],
            "negative": ["7", 0],
            "latent_image": ["11", 0],
        },
    },
    "4": {
        "class_type": "CheckpointLoaderSimple",
        "inputs": {"ckpt_name": "stable-audio-open-1.0.safetensors"},
    },
    "6": {
        "class_type": "CLIPTextEncode",
        "inputs": {"text": "rain on a tin roof", "clip": ["10", 0]},
    },
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["10", 0]}},
    "10": {
        "class_type": "CLIPLoader",
        "inputs": {"clip_name": "t5_base.safetensors", "type": "stable_audio"},
    },
    "11": {"class_type": "EmptyLatentAudio", "inputs": {"seconds": 10, "batch_size": 1}},
    "12": {"class_type": "VAEDecodeAudio", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "19": {
        "class_type": "SaveAudio",
        "inputs": {"filename_prefix": "audio/ComfyUI", "audio": ["12", 0]},
    },
}
