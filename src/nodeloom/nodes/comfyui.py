"""``ComfyUIWorkflow``: run a ComfyUI workflow (API format) on the account's ComfyUI server.

The workflow is what ComfyUI's "Export (API)" saves: an object of node id -> ``{class_type,
inputs}``, where an input is a value or a link ``[node id, output index]``. Declared
*bindings* put our inputs into it before it is queued: the text of ``text1``..``text4`` into a
node input as text or as a number, the image of ``image1``..``image3`` uploaded with
``/upload/image`` and its stored name put into a node input (a ``LoadImage``'s ``image``). An
input that is not connected leaves the workflow's own value. The ``output`` names the node
whose first (or ``index``-th) image becomes our artifact.

The prompt id is chosen here and kept on the node run before the prompt is queued (ComfyUI
takes a caller's ``prompt_id``): after a worker crash the node attaches to it — its history
if it finished, its progress if it is queued — and queues it only if the server never got
it. Waiting is I/O on the event loop: the node holds no sandbox process. Cancelling the run
interrupts the prompt and deletes it from the server's queue. See docs/providers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import struct
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import websockets
from pydantic import BaseModel, ConfigDict, Field

from nodeloom.nodes.base import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    ParamProblem,
    Params,
    Produced,
)
from nodeloom.nodes.comfyui_protocol import ComfyUIClient, ComfyUIError, auth_headers
from nodeloom.nodes.http import Allowlist
from nodeloom.settings import Settings

CREDENTIAL_KIND = "comfyui"
TEXT_SLOTS = ("text1", "text2", "text3", "text4")
IMAGE_SLOTS = ("image1", "image2", "image3")
WORKFLOW_MAX_NODES = 2000
WORKFLOW_MAX_BYTES = 2 * 1024 * 1024
SILENCE_CHECK = 5.0  # seconds without a message before the history is looked at anyway
POLL_INTERVAL = 1.0  # seconds between history checks when the WebSocket is gone
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

Slot = Literal["text1", "text2", "text3", "text4", "image1", "image2", "image3"]


class Binding(BaseModel):
    """One of our inputs put into one ComfyUI node input."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Slot = Field(description="Our input whose value is sent: text1..text4, image1..3.")
    node: str = Field(min_length=1, max_length=64, description="The ComfyUI node id.")
    input: str = Field(min_length=1, max_length=200, description="The input of that node.")
    type: Literal["text", "number", "image"] = Field(
        description="text: the text as is; number: the text parsed as a number; image: "
        "uploaded, its stored name sent."
    )


class OutputBinding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str = Field(min_length=1, max_length=64, description="The ComfyUI output node id.")
    index: Annotated[int, Field(ge=0, le=1000)] = Field(
        default=0, description="Which of that node's images (0: the first)."
    )


class ComfyUIWorkflowParams(Params):
    workflow: dict[str, Any] = Field(
        default_factory=dict,
        description="The workflow in ComfyUI's API format (Export (API)): node id -> "
        "{class_type, inputs}.",
    )
    bindings: list[Binding] = Field(
        default_factory=list, max_length=32, description="Our inputs -> ComfyUI node inputs."
    )
    output: OutputBinding | None = Field(
        default=None,
        description="The node whose image becomes the artifact; none: the first image of "
        "the workflow's outputs.",
    )
    credential: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="A comfyui credential of this account (its id): the server the workflow "
        "runs on.",
    )


# ----------------------------------------------------------------------------- checks


def workflow_problems(params: ComfyUIWorkflowParams) -> list[ParamProblem]:
    """What makes the workflow or its bindings unusable, each at its param's pointer."""
    workflow = params.workflow
    problems: list[ParamProblem] = []
    if not params.credential:
        problems.append(ParamProblem(("credential",), "name a comfyui credential of this account"))
    if not workflow:
        return [*problems, ParamProblem(("workflow",), "the workflow has no nodes")]
    if len(workflow) > WORKFLOW_MAX_NODES:
        return [
            *problems,
            ParamProblem(("workflow",), f"the workflow has over {WORKFLOW_MAX_NODES} nodes"),
        ]
    if len(json.dumps(workflow)) > WORKFLOW_MAX_BYTES:
        return [
            *problems,
            ParamProblem(("workflow",), f"the workflow is over {WORKFLOW_MAX_BYTES} bytes"),
        ]
    shapes = len(problems)
    for node_id, node in workflow.items():
        if (
            not isinstance(node, dict)
            or not isinstance(node.get("class_type"), str)
            or not isinstance(node.get("inputs"), dict)
        ):
            problems.append(
                ParamProblem(
                    ("workflow", node_id),
                    f"node {node_id} must be an object {{class_type, inputs}} (ComfyUI's API "
                    "format, as Export (API) saves it; not the UI format)",
                )
            )
    if len(problems) > shapes:
        return problems
    known = ", ".join(list(workflow)[:20])
    targets: set[tuple[str, str]] = set()
    for index, binding in enumerate(params.bindings):
        at = ("bindings", index)
        node = workflow.get(binding.node)
        if node is None:
            problems.append(
                ParamProblem((*at, "node"), f"no node {binding.node!r} in the workflow ({known})")
            )
            continue
        inputs = node["inputs"]
        if binding.input not in inputs:
            names = ", ".join(inputs) or "none"
            problems.append(
                ParamProblem(
                    (*at, "input"),
                    f"node {binding.node} ({node['class_type']}) has no input "
                    f"{binding.input!r} (its inputs: {names})",
                )
            )
            continue
        if _is_link(inputs[binding.input]):
            problems.append(
                ParamProblem(
                    (*at, "input"),
                    f"input {binding.input!r} of node {binding.node} is fed by node "
                    f"{inputs[binding.input][0]}'s output; bind an input that holds a value",
                )
            )
        if (binding.type == "image") != (binding.source in IMAGE_SLOTS):
            wanted = "image1..image3" if binding.type == "image" else "text1..text4"
            problems.append(
                ParamProblem((*at, "source"), f"a {binding.type} binding takes {wanted}")
            )
        if (binding.node, binding.input) in targets:
            problems.append(
                ParamProblem(
                    (*at, "input"), f"input {binding.input!r} of node {binding.node} is bound twice"
                )
            )
        targets.add((binding.node, binding.input))
    if params.output is not None and params.output.node not in workflow:
        problems.append(
            ParamProblem(
                ("output", "node"), f"no node {params.output.node!r} in the workflow ({known})"
            )
        )
    return problems


def _is_link(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
    )


def _number(text: str, binding: Binding) -> int | float:
    value = text.strip()
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise NodeFailure(
            f"input {binding.source} is bound as a number to {binding.input!r} of node "
            f"{binding.node}, but its text {value[:40]!r} is not a number"
        )
    return number


# ----------------------------------------------------------------------------- waiting


class JobIds(Protocol):
    """Where the provider's job id of this node run is kept (durably, before waiting)."""

    async def stored(self) -> str | None: ...

    async def store(self, job_id: str) -> None: ...


@dataclass
class MemoryJobIds:
    """A job id kept for this execution only (no resume after a crash)."""

    value: str | None = None

    async def stored(self) -> str | None:
        return self.value

    async def store(self, job_id: str) -> None:
        self.value = job_id


Report = Callable[[float, str], Awaitable[None]]


@dataclass
class Tracker:
    """Progress of one prompt from its messages: nodes done out of the workflow's, plus the
    running node's own ``value/max``."""

    total: int
    report: Report
    done: set[str] = field(default_factory=set)
    current: str | None = None
    step: float = 0.0
    stopped: bool = False  # the prompt was stopped on the server (our run cancelled)

    def fraction(self) -> float:
        return min(0.99, (len(self.done) + self.step) / max(1, self.total))

    async def on(self, kind: str, data: Mapping[str, Any], classes: Mapping[str, str]) -> None:
        if kind == "execution_cached":
            self.done.update(str(n) for n in data.get("nodes") or [])
            await self.report(self.fraction(), "cached nodes skipped")
        elif kind == "executing" and data.get("node") is not None:
            if self.current is not None:
                self.done.add(self.current)
            self.current, self.step = str(data["node"]), 0.0
            name = classes.get(self.current, "?")
            await self.report(self.fraction(), f"running node {self.current} ({name})")
        elif kind == "progress":
            value, top = data.get("value"), data.get("max")
            if isinstance(value, int | float) and isinstance(top, int | float) and top > 0:
                self.step = min(1.0, value / top)
                node = data.get("node") or self.current
                await self.report(self.fraction(), f"node {node}: step {value:g} of {top:g}")
        elif kind == "executed":
            self.done.add(str(data.get("node")))
            self.step = 0.0


def _failure_of(entry: Mapping[str, Any]) -> NodeFailure | None:
    """The error of a finished prompt's history entry, if it failed."""
    status = entry.get("status")
    if not isinstance(status, dict) or status.get("status_str") != "error":
        return None
    for message in status.get("messages") or []:
        if isinstance(message, list) and len(message) == 2 and message[0] == "execution_error":
            return execution_error(message[1])
    return ComfyUIError("ComfyUI reports the workflow failed")


def execution_error(data: Any) -> NodeFailure:
    data = data if isinstance(data, dict) else {}
    node, kind = data.get("node_id", "?"), data.get("node_type", "?")
    detail = str(data.get("exception_message") or "").strip()[:500]
    exc = data.get("exception_type")
    return ComfyUIError(
        f"ComfyUI failed at node {node} ({kind}): " + (f"{exc}: {detail}" if exc else detail)
    )


async def wait_for(
    client: ComfyUIClient,
    prompt_id: str,
    connection: Any | None,
    tracker: Tracker,
    classes: Mapping[str, str],
) -> dict[str, Any]:
    """The history entry of ``prompt_id`` once it has finished, following the server's
    messages on ``connection`` (a WebSocket, or None: poll). The history is looked at after
    a silence too, so a missed message never leaves the node waiting."""
    while True:
        if connection is not None:
            try:
                raw = await asyncio.wait_for(connection.recv(), SILENCE_CHECK)
            except TimeoutError:
                raw = None
            except websockets.ConnectionClosed:
                connection = None
                raw = None
            if isinstance(raw, str):
                try:
                    message = json.loads(raw)
                except ValueError:
                    message = None
                if isinstance(message, dict) and isinstance(message.get("data"), dict):
                    data = message["data"]
                    kind = str(message.get("type"))
                    if data.get("prompt_id") not in (None, prompt_id):
                        continue
                    if kind == "execution_error":
                        raise execution_error(data)
                    if kind == "execution_interrupted":
                        raise ComfyUIError("the workflow was interrupted on the ComfyUI server")
                    finished = kind == "execution_success" or (
                        kind == "executing" and data.get("node") is None
                    )
                    if not finished:
                        await tracker.on(kind, data, classes)
                        continue
                elif raw is not None:
                    continue
            elif raw is not None:
                continue  # a binary preview frame
        else:
            await asyncio.sleep(POLL_INTERVAL)
        entry = await client.history(prompt_id)
        if entry is not None:
            failure = _failure_of(entry)
            if failure is not None:
                raise failure
            return entry
        if connection is None and not await client.queued(prompt_id):
            raise ComfyUIError(
                f"the ComfyUI server no longer knows prompt {prompt_id} (restarted?)"
            )


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (the only format this node keeps as is)."""
    with path.open("rb") as file:
        head = file.read(24)
    if len(head) < 24 or not head.startswith(PNG_SIGNATURE) or head[12:16] != b"IHDR":
        raise ComfyUIError("ComfyUI's output is not a PNG image")
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


# ----------------------------------------------------------------------------- the node


@dataclass(frozen=True)
class Connection:
    """A comfyui credential as handed to the node: the server and its secret fields."""

    base_url: str
    secret: Mapping[str, str] = field(repr=False)

    @classmethod
    def of(cls, credential: Mapping[str, str]) -> Connection:
        secret = {k: v for k, v in credential.items() if k != "base_url" and k != "username"}
        if credential.get("username"):
            secret = {**secret, "username": credential["username"]}
        return cls(base_url=credential["base_url"], secret=secret)


class ComfyUIWorkflow(NodeType):
    spec = NodeSpec(
        type="ComfyUIWorkflow",
        version=1,
        category="ai",
        title="ComfyUI workflow",
        description="Run a ComfyUI workflow (API format) on your ComfyUI server; bound inputs "
        "are put into its nodes, and one output node's image is the result.",
        inputs=(
            *(Input(name, Kind.TEXT, required=False) for name in TEXT_SLOTS),
            *(Input(name, Kind.IMAGE, required=False) for name in IMAGE_SLOTS),
        ),
        output=Output(Kind.IMAGE),
        params=ComfyUIWorkflowParams,
        cost=Cost(credits=10),
        cacheable=False,
        sandboxed=False,
    )
    credential_kind = CREDENTIAL_KIND

    def param_problems(self, params: ComfyUIWorkflowParams) -> list[ParamProblem]:
        return workflow_problems(params)

    async def run(
        self, ctx: NodeContext, params: ComfyUIWorkflowParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        credential = getattr(ctx, "credential", None)
        if not credential:
            raise NodeFailure("the node's credential was not handed over", "internal_error")
        jobs: JobIds = getattr(ctx, "job_ids", None) or MemoryJobIds()

        async def report(fraction: float, message: str) -> None:
            await ctx.progress(fraction)

        scratch = await asyncio.to_thread(lambda: ctx.scratch_dir)
        return await execute(
            ctx.settings, Connection.of(credential), params, inputs, jobs, report, scratch
        )


async def execute(
    settings: Settings,
    connection: Connection,
    params: ComfyUIWorkflowParams,
    inputs: Mapping[str, InputValue],
    jobs: JobIds,
    report: Report,
    scratch: Path,
) -> Produced:
    """Queue the bound workflow (or attach to the prompt queued before a crash), follow it
    to its end, and download the output image."""
    tracker = Tracker(total=len(params.workflow), report=report)
    client = ComfyUIClient(
        connection.base_url,
        auth_headers(connection.secret),
        Allowlist.from_settings(settings),
        timeout=settings.http_timeout_seconds,
        secrets=tuple(connection.secret.values()),
    )
    async with client:
        prompt_id = await jobs.stored()
        client_id = f"nodeloom-{uuid.uuid4().hex}"
        entry = await _follow(client, params, inputs, jobs, prompt_id, client_id, tracker)
        return await _output(client, entry, params.output, settings, scratch)


async def _follow(
    client: ComfyUIClient,
    params: ComfyUIWorkflowParams,
    inputs: Mapping[str, InputValue],
    jobs: JobIds,
    prompt_id: str | None,
    client_id: str,
    tracker: Tracker,
) -> dict[str, Any]:
    try:
        return await _attach_or_submit(client, params, inputs, jobs, prompt_id, client_id, tracker)
    except asyncio.CancelledError:
        # Cancelled before the wait began (while queueing): stop the prompt if it got there.
        current = await jobs.stored()
        if current is not None and not tracker.stopped:
            await asyncio.shield(client.cancel(current))
        raise


async def _wait(
    client: ComfyUIClient,
    prompt_id: str,
    ws: Any | None,
    tracker: Tracker,
    classes: Mapping[str, str],
) -> dict[str, Any]:
    """``wait_for``; when our run is cancelled meanwhile, the prompt is stopped on the server
    first (interrupted if it runs, deleted if it waits), before the WebSocket is closed."""
    try:
        return await wait_for(client, prompt_id, ws, tracker, classes)
    except asyncio.CancelledError:
        tracker.stopped = True
        await asyncio.shield(client.cancel(prompt_id))
        raise


async def _attach_or_submit(
    client: ComfyUIClient,
    params: ComfyUIWorkflowParams,
    inputs: Mapping[str, InputValue],
    jobs: JobIds,
    prompt_id: str | None,
    client_id: str,
    tracker: Tracker,
) -> dict[str, Any]:
    classes = {k: str(v.get("class_type")) for k, v in params.workflow.items()}
    async with contextlib.AsyncExitStack() as stack:
        if prompt_id is not None:
            entry = await client.history(prompt_id)
            if entry is not None:  # finished while we were away
                failure = _failure_of(entry)
                if failure is not None:
                    raise failure
                return entry
            if await client.queued(prompt_id):
                ws = await _listen(stack, client, client_id)
                return await _wait(client, prompt_id, ws, tracker, classes)
            # Never reached the server (the worker stopped between keeping the id and
            # queueing it): queue it now, under the same id.
        prompt = await bound_prompt(client, params, inputs)
        prompt_id = prompt_id or str(uuid.uuid4())
        await jobs.store(prompt_id)  # kept before it is queued: a crash from here on attaches
        ws = await _listen(stack, client, client_id)  # before queueing: no message is missed
        answered = await client.submit(prompt, client_id, prompt_id)
        if answered != prompt_id:  # a server that ignores a caller's id
            prompt_id = answered
            await jobs.store(prompt_id)
        await tracker.report(0.0, f"queued on ComfyUI as {prompt_id}")
        return await _wait(client, prompt_id, ws, tracker, classes)


async def _listen(
    stack: contextlib.AsyncExitStack, client: ComfyUIClient, client_id: str
) -> Any | None:
    """The server's WebSocket for ``client_id``, or None (the node then polls the history)."""
    try:
        return await stack.enter_async_context(client.websocket(client_id))
    except (OSError, websockets.InvalidHandshake, websockets.InvalidURI, TimeoutError):
        return None


async def bound_prompt(
    client: ComfyUIClient, params: ComfyUIWorkflowParams, inputs: Mapping[str, InputValue]
) -> dict[str, Any]:
    """The workflow with the connected inputs put where the bindings say (images uploaded)."""
    prompt: dict[str, Any] = json.loads(json.dumps(params.workflow))
    uploaded: dict[str, str] = {}
    for binding in params.bindings:
        value = inputs.get(binding.source)
        if value is None:
            continue
        ref = value[0] if isinstance(value, list) else value
        target = prompt[binding.node]["inputs"]
        if binding.type == "image":
            if binding.source not in uploaded:
                data = await asyncio.to_thread(ref.read_bytes)
                name = f"nodeloom-{ref.sha256[:32]}.png"
                uploaded[binding.source] = await client.upload_image(name, data)
            target[binding.input] = uploaded[binding.source]
        elif binding.type == "number":
            target[binding.input] = _number(ref.read_text(), binding)
        else:
            target[binding.input] = ref.read_text()
    return prompt


async def _output(
    client: ComfyUIClient,
    entry: Mapping[str, Any],
    output: OutputBinding | None,
    settings: Settings,
    scratch: Path,
) -> Produced:
    outputs = entry.get("outputs")
    outputs = outputs if isinstance(outputs, dict) else {}
    if output is None:  # the first image of any output node, in node order
        output = next(
            (
                OutputBinding(node=node_id)
                for node_id in sorted(outputs, key=lambda k: (len(k), k))
                if isinstance(outputs[node_id], dict) and outputs[node_id].get("images")
            ),
            None,
        )
        if output is None:
            raise ComfyUIError("ComfyUI's workflow produced no image")
    node = outputs.get(output.node)
    images = node.get("images") if isinstance(node, dict) else None
    if not isinstance(images, list) or not images:
        raise ComfyUIError(f"ComfyUI's node {output.node} produced no image")
    if output.index >= len(images) or not isinstance(images[output.index], dict):
        raise ComfyUIError(
            f"ComfyUI's node {output.node} produced {len(images)} image(s); "
            f"image {output.index} was asked for"
        )
    await asyncio.to_thread(scratch.mkdir, 0o700, True, True)
    dest = scratch / f"comfyui-{uuid.uuid4().hex}.png"
    await client.download(images[output.index], dest, settings.max_artifact_bytes)
    width, height = png_size(dest)
    if width * height > settings.max_image_pixels:
        raise NodeFailure(
            f"ComfyUI's image is {width}x{height}, over the {settings.max_image_pixels:,} "
            "pixel limit",
            "limit_exceeded",
        )
    return Produced(path=dest, width=width, height=height)


NODES: list[NodeType] = [ComfyUIWorkflow()]
