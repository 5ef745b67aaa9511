"""One sandbox process: runs node jobs one at a time, each under OS limits.

Forked by the fork server (``zygote.py``) with every node module already imported. The server
sends ``init`` (settings without secrets), then jobs:

- ``{"t": "node", ...}``: run one node; progress goes back as ``{"t": "progress", "f": x}``
  and the result as ``{"t": "done", "ok": true, ...}`` (a small output rides along as a blob,
  a large one stays in the node's scratch directory and only its path is sent) or
  ``{"t": "done", "ok": false, "code": ..., "message": ...}``;
- ``{"t": "check", ...}``: the expensive parameter checks of a graph (template syntax).

Before each job the process lowers its own limits: address space to what it maps now plus the
job's memory budget (RLIMIT_AS), CPU to what it has used plus the job's CPU budget (RLIMIT_CPU,
whose SIGXCPU ends the process). A job that runs out of memory is answered and the process
exits, since its heap may be fragmented; one that overruns its CPU is killed by the kernel and
reported by the fork server. Wall time is the server's to enforce: it kills the process.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import math
import os
import resource
import signal
import socket
import traceback
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import SecretStr, ValidationError

from nodeloom.budget import MB
from nodeloom.nodes import jsonvalue
from nodeloom.nodes.adapters.media import to_artifact
from nodeloom.nodes.ingest import ingest
from nodeloom.nodes.registry import Registry, build_registry
from nodeloom.sandbox.wire import read_blocking, write_blocking
from nodeloom.sdk._node import ArtifactRef, InputValue, Kind, NodeFailure, Produced
from nodeloom.settings import Settings

T = TypeVar("T")
log = logging.getLogger("nodeloom.sandbox")

INLINE_OUTPUT_BYTES = 1 << 20  # larger outputs are handed over as a file in the scratch dir
PROGRESS_SPACING = 0.2  # seconds between progress messages (the server rate-limits too)
RECYCLE_AFTER_JOBS = 2000
RECYCLE_RSS_GROWTH = 256 * MB  # a process that grew this much since it started is replaced
_PR_SET_PDEATHSIG = 1

_registry: Registry | None = None


def preload() -> None:
    """Import every node module (in the fork server, before any fork)."""
    global _registry
    from nodeloom.nodes import catalog, packages

    # The built-in types and the packages the server loaded (it names them in our
    # environment; the fork server imports them once, before any fork).
    _registry = build_registry([*catalog.all_nodes(), *packages.sandbox_nodes()])


def registry() -> Registry:
    if _registry is None:
        preload()
    assert _registry is not None
    return _registry


def _die_with_parent() -> None:
    """If the fork server dies, so does this process (it is its only way to be stopped)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the fork server kills us on its way out
        pass


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _limit(memory_bytes: int, cpu_seconds: float) -> None:
    mapped = _status_kb("VmSize:") * 1024
    _, as_hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = mapped + memory_bytes
    if as_hard != resource.RLIM_INFINITY:
        soft = min(soft, as_hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, as_hard))
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    cpu_soft = math.ceil(_cpu_seconds() + cpu_seconds)
    if cpu_hard != resource.RLIM_INFINITY:
        cpu_soft = min(cpu_soft, cpu_hard)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_soft, cpu_hard))


def _unlimit() -> None:
    for which in (resource.RLIMIT_AS, resource.RLIMIT_CPU):
        _, hard = resource.getrlimit(which)
        resource.setrlimit(which, (hard, hard))


def _static_limits(settings: Settings) -> None:
    # No core files (SIGXCPU's default action would write one), and no file larger than the
    # artifact cap: a write past it fails with EFBIG instead of filling the disk.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    size = settings.max_artifact_bytes + MB
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard == resource.RLIM_INFINITY or size < hard:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class _Context:
    """The NodeContext of a node running here."""

    def __init__(
        self,
        message: Mapping[str, Any],
        settings: Settings,
        executor: ThreadPoolExecutor,
        sock: socket.socket,
    ) -> None:
        self.run_id = str(message["run_id"])
        self.node_id = str(message["node_id"])
        self.account_id = str(message["account_id"])
        self.input: Mapping[str, Any] | None = message.get("input")
        self.settings = settings
        self.inline = False
        self.credential_kind: str | None = None
        self._scratch = Path(message["scratch"])
        # Bound to small objects of their own, not to this context: a package's node is
        # handed these two (nodes/packages.py), and through them must reach nothing else.
        self.progress = _Progress(sock).report
        self.to_thread = _Threads(executor).run

    @property
    def scratch_dir(self) -> Path:
        self._scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self._scratch


class _Progress:
    """A node's progress reports, sent to the server at most every ``PROGRESS_SPACING``."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._last = 0.0

    async def report(self, fraction: float) -> None:
        now = asyncio.get_running_loop().time()
        if fraction < 1.0 and now - self._last < PROGRESS_SPACING:
            return
        self._last = now
        write_blocking(self._sock, {"t": "progress", "f": min(1.0, max(0.0, float(fraction)))})


class _Threads:
    """Blocking work of a node, on the process's thread pool."""

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self._executor = executor

    async def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))


def _ref(value: Mapping[str, Any]) -> ArtifactRef:
    return ArtifactRef(
        artifact_id=str(value["artifact_id"]),
        content_type=str(value["content_type"]),
        sha256=str(value["sha256"]),
        size_bytes=int(value["size_bytes"]),
        path=Path(value["path"]),
        width=value.get("width"),
        height=value.get("height"),
        duration_ms=value.get("duration_ms"),
    )


def _inputs(raw: Mapping[str, Any]) -> dict[str, InputValue]:
    values: dict[str, InputValue] = {}
    for name, value in raw.items():
        if value is None:
            values[name] = None
        elif isinstance(value, list):
            # None: an item a collector gathers that did not complete (nodes/batch.py).
            values[name] = cast(list[ArtifactRef], [_ref(v) if v else None for v in value])
        else:
            values[name] = _ref(value)
    return values


def _result(produced: Produced, ctx: _Context) -> tuple[dict[str, Any], bytes]:
    reply: dict[str, Any] = {
        "t": "done",
        "ok": True,
        "width": produced.width,
        "height": produced.height,
        "duration_ms": produced.duration_ms,
        "ports": list(produced.ports) if produced.ports is not None else None,
    }
    if produced.data is not None:
        if len(produced.data) <= INLINE_OUTPUT_BYTES:
            return reply, produced.data
        path = ctx.scratch_dir / f"output-{uuid.uuid4().hex}"
        path.write_bytes(produced.data)
        reply["path"] = str(path)
        return reply, b""
    if produced.path is None:
        raise NodeFailure("the node produced no output", "no_output")
    reply["path"] = str(produced.path)
    return reply, b""


def _failure(code: str, message: str) -> dict[str, Any]:
    return {"t": "done", "ok": False, "code": code, "message": message}


async def _node_job(
    message: Mapping[str, Any],
    settings: Settings,
    executor: ThreadPoolExecutor,
    sock: socket.socket,
) -> tuple[dict[str, Any], bytes]:
    node = registry().get(str(message["type"]))
    if node is None:
        return _failure("internal_error", f"unknown node type {message['type']!r}"), b""
    key = message.get("provider_key")
    if key:
        settings = settings.model_copy(update={"provider_api_key": SecretStr(str(key))})
    params = node.spec.params.model_validate(message["params"])
    credential = message.get("credential")
    if credential:  # the account's own endpoint and key replace the operator's, for this job
        settings = settings.model_copy(
            update={
                "provider_base_url": str(credential["base_url"]),
                "provider_api_key": SecretStr(str(credential["api_key"])),
            }
        )
    elif getattr(params, "credential", None):
        return _failure("internal_error", "the node's credential was not handed over"), b""
    ctx = _Context(message, settings, executor, sock)
    ctx.credential_kind = str(credential.get("kind", "openai")) if credential else None
    produced = await node.run(ctx, params, _inputs(message.get("inputs") or {}))
    if node.spec.output.kind == Kind.JSON:
        _check_json(produced)
    return _result(produced, ctx)


def _check_json(produced: Produced) -> None:
    """A json output must be JSON (within the limits): checked here, where the node ran."""
    data = produced.data
    if data is None and produced.path is not None:
        jsonvalue.check_size(produced.path.stat().st_size, "the JSON output")
        data = produced.path.read_bytes()
    try:
        text = (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise NodeFailure("the node's JSON output is not UTF-8", "invalid_json") from None
    jsonvalue.parse(text, "the node's JSON output")


def _check_job(message: Mapping[str, Any]) -> dict[str, Any]:
    answers: list[list[str]] = []
    for item in message.get("items", []):
        node = registry().get(str(item.get("type")))
        if node is None:
            answers.append([])
            continue
        try:
            params = node.spec.params.model_validate(item.get("params"))
        except ValidationError:
            answers.append([])  # reported by the cheap checks already
            continue
        answers.append(node.deep_problems(params))
    return {"t": "done", "ok": True, "problems": answers}


def _media_job(message: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """A provider's output made into an artifact (nodes/adapters/media.py); the result is
    a file of the job's scratch directory."""
    scratch = Path(str(message["scratch"]))
    produced = to_artifact(str(message["kind"]), Path(str(message["src"])), scratch, settings)
    if produced.path is None:
        assert produced.data is not None
        produced.path = scratch / f"output-{uuid.uuid4().hex}"
        produced.path.write_bytes(produced.data)
    return {
        "t": "done",
        "ok": True,
        "width": produced.width,
        "height": produced.height,
        "duration_ms": produced.duration_ms,
        "path": str(produced.path),
    }


def _ingest_job(message: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """An uploaded file decoded and converted (nodes/ingest.py) under the account's
    limits, which narrow the server's."""
    limits = dict(message.get("limits") or {})
    narrowed = settings.model_copy(update=limits)
    ingested = ingest(
        str(message["kind"]),
        str(message["format"]),
        Path(str(message["src"])),
        Path(str(message["scratch"])),
        narrowed,
    )
    return {"t": "done", "ok": True, **ingested.as_dict()}


def _run(
    message: dict[str, Any],
    settings: Settings,
    executor: ThreadPoolExecutor,
    sock: socket.socket,
    loop: asyncio.AbstractEventLoop,
) -> tuple[dict[str, Any], bytes, bool]:
    """(reply, blob, whether this process must exit afterwards)."""
    budget = message.get("budget") or {}
    _limit(int(budget.get("memory_mb", 256)) * MB, float(budget.get("cpu_seconds", 30)))
    try:
        if message.get("t") == "check":
            return _check_job(message), b"", False
        if message.get("t") == "media":
            return _media_job(message, settings), b"", False
        if message.get("t") == "ingest":
            return _ingest_job(message, settings), b"", False
        reply, blob = loop.run_until_complete(_node_job(message, settings, executor, sock))
        return reply, blob, False
    except NodeFailure as exc:
        return _failure(exc.code, exc.message), b"", False
    except MemoryError:
        limit = budget.get("memory_mb")
        return (
            _failure("node_memory_limit", f"the node needed more than its {limit} MB of memory"),
            b"",
            True,
        )
    except RecursionError:
        return _failure("node_failed", "the node's input is nested too deeply"), b"", False
    except Exception as exc:
        traceback.print_exc()
        return _failure("internal_error", f"the node failed: {type(exc).__name__}"), b"", True
    finally:
        _unlimit()


def serve(fd: int) -> int:
    """The main loop of a sandbox process; returns its exit code."""
    _die_with_parent()
    sock = socket.socket(fileno=fd)
    try:
        init, _ = read_blocking(sock, 0)
    except EOFError:
        return 0
    settings = Settings(**init["settings"])
    _static_limits(settings)
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="node-work")
    executor.submit(int).result()  # its first thread's stack counts before any budget applies
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    started_rss = _status_kb("VmRSS:") * 1024
    write_blocking(sock, {"t": "ready", "pid": os.getpid()})
    for _ in range(RECYCLE_AFTER_JOBS):
        try:
            message, _blob = read_blocking(sock, 0)
        except (EOFError, OSError):
            return 0
        reply, blob, leave = _run(message, settings, executor, sock, loop)
        grown = _status_kb("VmRSS:") * 1024 - started_rss > RECYCLE_RSS_GROWTH
        reply["recycle"] = leave or grown
        try:
            write_blocking(sock, reply, blob)
        except OSError:
            return 0
        if reply["recycle"]:
            return 0
    return 0
