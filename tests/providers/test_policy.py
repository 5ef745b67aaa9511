"""The shared adapter policy (nodes/adapters/policy.py) against small real HTTP servers on
127.0.0.1: retries honour Retry-After, a submission is not sent twice, the provider's error
is quoted with the secret masked, every URL a provider hands back passes the SSRF guard, a
download is bounded, and what comes back is converted to our types in a real sandbox
process."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from PIL import Image

from nodeloom import budget
from nodeloom.engine.context import ProviderNodeContext
from nodeloom.nodes.adapters import policy
from nodeloom.nodes.http import BlockedAddress
from nodeloom.sandbox.pool import SandboxPool
from nodeloom.sdk._node import Kind, NodeFailure, Produced
from nodeloom.settings import Settings
from tests.fakes import FakeServer, serve
from tests.nodes.conftest import make_settings

TOKEN = "r8_policy-test-token-0123456789"


def _webp() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (48, 32), "#3366cc").save(buffer, format="WEBP")
    return buffer.getvalue()


def _wav(tmp: Path) -> bytes:
    path = tmp / "tone.wav"
    with av.open(str(path), "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=22050, layout="mono")
        t = np.arange(22050 // 2) / 22050
        samples = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)[None, :]
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 22050
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path.read_bytes()


def _mov(tmp: Path) -> bytes:
    """A short MPEG-4 Part 2 video in a QuickTime file: not something we keep as it is."""
    path = tmp / "clip.mov"
    with av.open(str(path), "w", format="mov") as out:
        stream = out.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(10):
            image = Image.new("RGB", (64, 48), (i * 20, 80, 160))
            frame = av.VideoFrame.from_image(image)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path.read_bytes()


class Site:
    """A scripted provider: answers by path; ``script`` lists (status, headers, body) served
    before the path's own answer; counts what it was sent."""

    def __init__(self, tmp: Path) -> None:
        self.script: list[tuple[int, dict[str, str], bytes]] = []
        self.hits: dict[str, int] = {}
        self.auth: list[str | None] = []
        self.cookies: list[str | None] = []
        self.files = {
            "/out.webp": _webp(),
            "/out.wav": _wav(tmp),
            "/out.mov": _mov(tmp),
            "/big.bin": b"x" * 50_000,
        }
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                site.hits[self.path] = site.hits.get(self.path, 0) + 1
                site.auth.append(self.headers.get("Authorization"))
                site.cookies.append(self.headers.get("Cookie"))
                if site.script:
                    self._answer(*site.script.pop(0))
                elif self.path in site.files:
                    self._answer(200, {}, site.files[self.path])
                elif self.path == "/redirect-private":
                    self._answer(302, {"Location": "http://127.0.0.2:9/out.webp"}, b"")
                else:
                    self._answer(200, {"Content-Type": "application/json"}, b'{"id": "job-1"}')

            do_GET = _handle
            do_POST = _handle

        self.server: FakeServer = serve(Handler)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    yield s
    s.server.stop()


def _settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"http_allowlist": ["127.0.0.1/32"], "provider_max_retries": 3}
    values.update(overrides)
    return make_settings(tmp_path / "data", **values)


@pytest.fixture
async def pool(tmp_path: Path) -> AsyncIterator[SandboxPool]:
    sandbox = SandboxPool(_settings(tmp_path))
    await sandbox.start()
    yield sandbox
    await sandbox.stop()


def _ctx(
    settings: Settings, scratch: Path, sandbox: SandboxPool | None = None, **kwargs: Any
) -> ProviderNodeContext:
    jobs: list[dict[str, Any] | None] = []

    async def remember(job: dict[str, Any] | None) -> None:
        jobs.append(job)

    async def cancelled() -> bool:
        return bool(kwargs.get("cancelled"))

    async def convert(path: Path, kind: str) -> Produced:
        assert sandbox is not None
        limits = budget.resolve("Test", kind, "pro", overrides={}, plan_caps={}, timeout_seconds=60)
        return await sandbox.convert(path, kind, scratch, limits, "acct")

    async def progress(_fraction: float) -> None:
        return None

    ctx = ProviderNodeContext(
        credential=None,
        remembered_job=kwargs.get("remembered"),
        remember=remember,
        cancelled=cancelled,
        convert=convert,
        deadline=asyncio.get_running_loop().time() + 60,
        run_id="run",
        node_id="node",
        account_id="acct",
        run_input=None,
        settings=settings,
        report=progress,
        scratch=scratch,
    )
    ctx.jobs = jobs  # type: ignore[attr-defined]
    return ctx


def _api(settings: Settings, site: Site) -> policy.Provider:
    return policy.Provider(
        settings,
        name="Fakeprov",
        base_url=site.server.url + "/v1",
        headers={"Authorization": f"Bearer {TOKEN}"},
        secrets=(TOKEN,),
    )


async def test_telling_a_provider_context_creates_no_scratch_directory(tmp_path: Path) -> None:
    """A provider node that never writes a file leaves no directory behind: asking what
    its context is does not create one (a mkdir and an rmtree per generation)."""
    scratch = tmp_path / "scratch" / "node"
    ctx = _ctx(_settings(tmp_path), scratch)
    assert policy.provider_context(ctx) is ctx
    assert policy.connections_of(ctx) is None
    assert not scratch.exists()
    assert ctx.scratch_dir.is_dir()  # created when a node does ask for it


async def test_shared_connections_keep_no_cookie(tmp_path: Path, site: Site) -> None:
    """A process's shared provider client never sends back a cookie a provider set: one
    account's session must not follow another account's calls."""
    connections = policy.ProviderConnections()
    site.script.append((200, {"Set-Cookie": "session=abc; Path=/"}, b"{}"))
    try:
        for _ in range(2):
            async with policy.Provider(
                _settings(tmp_path),
                name="Fakeprov",
                base_url=site.server.url + "/v1",
                secrets=(TOKEN,),
                connections=connections,
            ) as api:
                await api.request("GET", "/cookie")
        assert len(connections) == 1
    finally:
        await connections.aclose()
    assert site.hits["/v1/cookie"] == 2
    assert site.cookies == [None, None]


async def test_429_retry_after_is_honoured(tmp_path: Path, site: Site) -> None:
    site.script.append((429, {"Retry-After": "1"}, b'{"detail": "slow down"}'))
    async with _api(_settings(tmp_path), site) as api:
        started = time.monotonic()
        body = await api.json("POST", "/predictions", json_body={"x": 1}, idempotent=False)
    assert body == {"id": "job-1"}
    assert time.monotonic() - started >= 0.95
    assert site.hits["/v1/predictions"] == 2


async def test_5xx_is_retried_when_idempotent_but_a_submission_is_not_resent(
    tmp_path: Path, site: Site
) -> None:
    site.script.append((502, {}, b"bad gateway"))
    async with _api(_settings(tmp_path), site) as api:
        assert await api.json("GET", "/predictions/job-1") == {"id": "job-1"}
        assert site.hits["/v1/predictions/job-1"] == 2
        site.script.append((500, {}, f'{{"detail": "boom with {TOKEN}"}}'.encode()))
        with pytest.raises(policy.ProviderError) as failure:
            await api.json("POST", "/predictions", json_body={}, idempotent=False)
    assert site.hits["/v1/predictions"] == 1  # a 500 may have been accepted: not resent
    assert failure.value.message == "Fakeprov refused the request (HTTP 500): boom with ***"
    assert TOKEN not in failure.value.message


class ClosingSite:
    """A provider that answers the first request on each connection and keeps it alive, then
    closes the connection on the next request without answering: what a server does when its
    keep-alive timeout ends just as a client reuses the connection."""

    def __init__(self) -> None:
        self.requests = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            answered = 0
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                self.requests += 1
                if answered:
                    return  # closed without an answer
                body = b'{"id": "job-1", "status": "processing"}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Connection: keep-alive\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                answered += 1

    def close(self) -> None:
        self.listener.close()


async def test_a_kept_alive_connection_closed_by_the_provider_is_asked_again(
    tmp_path: Path,
) -> None:
    site = ClosingSite()
    try:
        async with policy.Provider(
            _settings(tmp_path), name="Fakeprov", base_url=site.url + "/v1", headers={}
        ) as api:
            assert (await api.json("GET", "/predictions/job-1"))["id"] == "job-1"
            # The same connection is reused and closed unanswered: the poll is asked again
            # on a new one instead of failing the node.
            assert (await api.json("GET", "/predictions/job-1"))["status"] == "processing"
            assert site.requests == 3
            # A submission on a reused connection that the provider closes is not resent.
            with pytest.raises(policy.ProviderError) as failure:
                await api.json("POST", "/predictions", json_body={}, idempotent=False)
            assert "RemoteProtocolError" in failure.value.message
            assert site.requests == 4
    finally:
        site.close()


async def test_client_error_quotes_the_provider(tmp_path: Path, site: Site) -> None:
    site.script.append((422, {}, b'{"detail": [{"msg": "prompt is required"}]}'))
    async with _api(_settings(tmp_path), site) as api:
        with pytest.raises(policy.ProviderError) as failure:
            await api.json("POST", "/predictions", json_body={}, idempotent=False)
    assert failure.value.message == "Fakeprov refused the request (HTTP 422): prompt is required"
    assert failure.value.code == "provider_error"


async def test_the_api_address_is_checked(tmp_path: Path, site: Site) -> None:
    async with _api(_settings(tmp_path, http_allowlist=[]), site) as api:
        with pytest.raises(BlockedAddress):
            await api.json("GET", "/predictions/job-1")
    assert site.hits == {}


async def test_a_url_at_a_private_address_is_refused(tmp_path: Path, site: Site) -> None:
    settings = _settings(tmp_path)
    ctx = _ctx(settings, tmp_path / "scratch")
    async with _api(settings, site) as api:
        with pytest.raises(BlockedAddress, match=r"127\.0\.0\.2"):
            await api.fetch_file(ctx, "http://127.0.0.2:9/out.webp")
        with pytest.raises(BlockedAddress, match=r"127\.0\.0\.2"):  # after a redirect too
            await api.fetch_file(ctx, site.server.url + "/redirect-private")
        with pytest.raises(policy.ProviderError, match="file URL"):
            await api.fetch_file(ctx, "file:///etc/passwd")


async def test_an_oversized_download_is_refused(tmp_path: Path, site: Site) -> None:
    settings = _settings(tmp_path, provider_download_max_bytes=10_000)
    ctx = _ctx(settings, tmp_path / "scratch")
    async with _api(settings, site) as api:
        with pytest.raises(NodeFailure) as failure:
            await api.fetch_file(ctx, site.server.url + "/big.bin")
    assert failure.value.code == "limit_exceeded"
    assert "10,000 bytes" in failure.value.message


async def test_the_credential_goes_only_to_the_api_origin(tmp_path: Path, site: Site) -> None:
    settings = _settings(tmp_path)
    ctx = _ctx(settings, tmp_path / "scratch")
    other = policy.Provider(
        settings, name="Fakeprov", base_url="http://localhost:1/v1", headers={"X": "y"}
    )
    async with other as api:
        await api.fetch_file(ctx, site.server.url + "/out.webp")
    assert site.auth == [None]


async def test_outputs_are_converted_in_the_sandbox(
    tmp_path: Path, site: Site, pool: SandboxPool
) -> None:
    settings = _settings(tmp_path)
    scratch = tmp_path / "scratch"
    ctx = _ctx(settings, scratch, pool)
    async with _api(settings, site) as api:
        image = await api.download(ctx, site.server.url + "/out.webp", Kind.IMAGE)
        audio = await api.download(ctx, site.server.url + "/out.wav", Kind.AUDIO)
        video = await api.download(ctx, site.server.url + "/out.mov", Kind.VIDEO)
        text = await api.download(ctx, "data:text/plain;base64,aGVsbG8=", Kind.TEXT)
    assert image.path is not None and image.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (image.width, image.height) == (48, 32)
    assert audio.path is not None and audio.path.suffix == ".mp3"
    assert audio.duration_ms is not None and 450 <= audio.duration_ms <= 600
    with av.open(str(audio.path)) as container:
        assert container.streams.audio[0].codec_context.codec.canonical_name == "mp3"
    assert video.path is not None
    with av.open(str(video.path)) as container:
        assert "mp4" in container.format.name
        assert container.streams.video[0].codec_context.codec.canonical_name == "h264"
    assert (video.width, video.height) == (64, 48)
    assert text.path is not None and text.path.read_bytes() == b"hello"


async def test_a_damaged_output_fails_with_a_reason(
    tmp_path: Path, site: Site, pool: SandboxPool
) -> None:
    settings = _settings(tmp_path)
    ctx = _ctx(settings, tmp_path / "scratch", pool)
    async with _api(settings, site) as api:
        with pytest.raises(NodeFailure, match="not a readable image"):
            await api.download(ctx, site.server.url + "/big.bin", Kind.IMAGE)


async def test_submit_once_attaches_to_the_remembered_job(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    submitted = 0

    async def submit() -> dict[str, Any]:
        nonlocal submitted
        submitted += 1
        return {"id": f"job-{submitted}"}

    async def cancel(job: policy.Job) -> None:
        raise AssertionError(f"{job.id} cancelled but the run was not")

    first = _ctx(settings, tmp_path / "scratch")
    job = await policy.submit_once(first, "fake", {"prompt": "a"}, submit, cancel=cancel)
    assert (job.id, job.attached, submitted) == ("job-1", False, 1)
    stored = first.jobs[-1]  # type: ignore[attr-defined]
    assert stored["id"] == "job-1" and stored["provider"] == "fake"
    again = _ctx(settings, tmp_path / "scratch", remembered=stored)
    job = await policy.submit_once(again, "fake", {"prompt": "a"}, submit, cancel=cancel)
    assert (job.id, job.attached, submitted) == ("job-1", True, 1)
    changed = _ctx(settings, tmp_path / "scratch", remembered=stored)
    job = await policy.submit_once(changed, "fake", {"prompt": "b"}, submit, cancel=cancel)
    assert (job.id, job.attached, submitted) == ("job-2", False, 2)


async def _until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_stop_during_the_submission_waits_for_its_answer_then_cancels_the_job(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    calls: list[str] = []
    answer = asyncio.Event()

    async def submit() -> dict[str, Any]:
        calls.append("submit")
        await answer.wait()  # the provider made the job; its answer is on its way
        return {"id": "job-1"}

    async def cancel(job: policy.Job) -> None:
        calls.append(f"cancel {job.id}")

    ctx = _ctx(settings, tmp_path / "scratch", cancelled=True)
    task = asyncio.create_task(policy.submit_once(ctx, "fake", {"p": 1}, submit, cancel=cancel))
    await _until(lambda: calls == ["submit"])
    task.cancel()  # the engine stops the node: the run was cancelled
    await asyncio.sleep(0.05)
    assert not task.done()  # the stop waits for the answer, to know the job
    answer.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == ["submit", "cancel job-1"]
    assert [job and job["id"] for job in ctx.jobs] == ["job-1", None]  # type: ignore[attr-defined]


async def test_a_cancel_read_once_the_id_is_committed_cancels_the_job(tmp_path: Path) -> None:
    # The run was cancelled as the job was made, and no stop reached the node: the cancel
    # flag read after the commit is enough.
    settings = _settings(tmp_path)
    calls: list[str] = []

    async def submit() -> dict[str, Any]:
        calls.append("submit")
        return {"id": "job-1"}

    async def cancel(job: policy.Job) -> None:
        calls.append(f"cancel {job.id}")

    ctx = _ctx(settings, tmp_path / "scratch", cancelled=True)
    task = asyncio.create_task(policy.submit_once(ctx, "fake", {"p": 1}, submit, cancel=cancel))
    await _until(lambda: len(calls) == 2)
    assert calls == ["submit", "cancel job-1"]
    assert [job and job["id"] for job in ctx.jobs] == ["job-1", None]  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    assert not task.done()  # waiting for the engine's stop, to end cancelled like any node
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == ["submit", "cancel job-1"]  # the stop does not cancel it twice


async def test_cancelling_asks_the_provider_only_when_the_run_was_cancelled(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    calls: list[str] = []

    async def cancel() -> None:
        calls.append("cancel")

    for run_cancelled in (False, True):
        ctx = _ctx(settings, tmp_path / "scratch", cancelled=run_cancelled)

        async def wait(c: ProviderNodeContext = ctx) -> None:
            async with policy.cancelling(c, cancel):
                await asyncio.sleep(30)

        task = asyncio.create_task(wait())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert calls == ["cancel"]


async def test_a_second_stop_does_not_cut_the_providers_cancel_short(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    done: list[str] = []

    async def cancel() -> None:
        await asyncio.sleep(0.2)  # the provider takes its time to answer the cancel
        done.append("cancelled")

    ctx = _ctx(settings, tmp_path / "scratch", cancelled=True)

    async def wait() -> None:
        async with policy.cancelling(ctx, cancel):
            await asyncio.sleep(30)

    task = asyncio.create_task(wait())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()  # stopped again while the provider is being told
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == ["cancelled"]  # the node ended only once the provider had answered


def test_pass_through_price(tmp_path: Path) -> None:
    from nodeloom.sdk._node import Cost, Input, NodeSpec, NodeType, Output, Params

    class Paid(NodeType):
        spec = NodeSpec(
            type="Paid",
            version=1,
            category="ai",
            title="t",
            description="d",
            inputs=(Input("text", Kind.TEXT),),
            output=Output(Kind.IMAGE),
            params=Params,
            cost=Cost(credits=2, pass_through=50),
        )

        async def run(self, ctx: Any, params: Any, inputs: Any) -> Produced:
            raise AssertionError

    settings = _settings(tmp_path, provider_credits_per_usd=100, provider_cost_markup=0.25)
    node, params = Paid(), Params()
    assert node.estimate_credits(params) == 52
    assert node.charge_for(params, Produced(provider_cost_usd=0.1), settings) == 2 + 13
    assert node.charge_for(params, Produced(provider_cost_usd=3.0), settings) == 52  # capped
    assert node.charge_for(params, Produced(), settings) == 2
