"""``ComfyUIWorkflow``: run a ComfyUI workflow (API format) on the account's ComfyUI server.

The workflow is what ComfyUI's "Export (API)" saves: an object of node id -> ``{class_type,
inputs}``, where an input is a value or a link ``[node id, output index]``. Declared
*bindings* put our inputs into it before it is queued: the text of ``text1``..``text4`` into a
node input as text or as a number, the image of ``image1``..``image3`` uploaded with
``/upload/image`` and its stored name put into a node input (a ``LoadImage``'s ``image``). An
input that is not connected leaves the workflow's own value. The ``output`` names the node
whose first (or ``index``-th) file of the node type's kind becomes our artifact:
``ComfyUIWorkflow`` keeps an image, ``ComfyUIWorkflowVideo`` a video (MP4),
``ComfyUIWorkflowAudio`` a sound (MP3) — see comfyui_outputs.py.

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
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import httpx
import websockets
from pydantic import BaseModel, ConfigDict, Field

from nodeloom.nodes.adapters import comfyui_fleet, policy
from nodeloom.nodes.adapters.comfyui_outputs import fetch_output
from nodeloom.nodes.adapters.comfyui_protocol import (
    CREDENTIAL_KIND,
    ERROR_QUOTE,
    ComfyUIClient,
    auth_headers,
)
from nodeloom.nodes.adapters.policy import ProviderError
from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    ParamProblem,
    Params,
    Produced,
)

PROVIDER = "comfyui"  # as the stored job names it
TEXT_SLOTS = ("text1", "text2", "text3", "text4")
IMAGE_SLOTS = ("image1", "image2", "image3")
WORKFLOW_MAX_NODES = 2000
WORKFLOW_MAX_BYTES = 2 * 1024 * 1024
SILENCE_CHECK = 5.0  # seconds without a message before the history is looked at anyway
POLL_INTERVAL = 1.0  # seconds between history checks when the WebSocket is gone

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
        default=0,
        description="Which of the files of the node's kind (image, video or audio) that "
        "node saved (0: the first).",
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
        description="The output node whose file of the node's kind (image, video or audio) "
        "becomes the artifact; none: the first such file of the workflow's outputs.",
    )
    credential: str = policy.credential_field(CREDENTIAL_KIND)


class ComfyUIWorkflowTimedParams(ComfyUIWorkflowParams):
    """The video and audio variants' params: the length held for the per-second price."""

    max_seconds: int = policy.max_seconds_field()


# ----------------------------------------------------------------------------- checks


def workflow_problems(params: ComfyUIWorkflowParams) -> list[ParamProblem]:
    """What makes the workflow or its bindings unusable, each at its param's pointer."""
    workflow = params.workflow
    problems: list[ParamProblem] = []
    size = None
    if not workflow:
        size = "the workflow has no nodes"
    elif len(workflow) > WORKFLOW_MAX_NODES:
        size = f"the workflow has over {WORKFLOW_MAX_NODES} nodes"
    elif len(json.dumps(workflow)) > WORKFLOW_MAX_BYTES:
        size = f"the workflow is over {WORKFLOW_MAX_BYTES} bytes"
    if size is not None:
        return [ParamProblem(("workflow",), size)]
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


@dataclass
class Tracker:
    """Progress of one prompt from its messages: nodes done (run or cached) out of the
    workflow's, plus the running node's own ``value/max`` steps."""

    ctx: NodeContext
    total: int
    done: set[str] = field(default_factory=set)
    current: str | None = None
    step: float = 0.0

    async def report(self) -> None:
        await policy.report(self.ctx, (len(self.done) + self.step) / max(1, self.total))

    async def on(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind == "execution_cached":
            self.done.update(str(n) for n in data.get("nodes") or [])
        elif kind == "executing" and data.get("node") is not None:
            if self.current is not None:
                self.done.add(self.current)
            self.current, self.step = str(data["node"]), 0.0
        elif kind == "progress":
            value, top = data.get("value"), data.get("max")
            if not (isinstance(value, int | float) and isinstance(top, int | float) and top > 0):
                return
            self.step = min(1.0, value / top)
        elif kind == "executed":
            self.done.add(str(data.get("node")))
            self.step = 0.0
        else:
            return
        await self.report()


def _failure_of(entry: Mapping[str, Any]) -> NodeFailure | None:
    """The error of a finished prompt's history entry, if it failed."""
    status = entry.get("status")
    if not isinstance(status, dict) or status.get("status_str") != "error":
        return None
    for message in status.get("messages") or []:
        if isinstance(message, list) and len(message) == 2:
            if message[0] == "execution_error":
                return execution_error(message[1])
            if message[0] == "execution_interrupted":
                return ProviderError("ComfyUI failed: the workflow was interrupted on the server")
    return ProviderError("ComfyUI failed: the server reports the workflow failed")


async def _finished_unwatched(
    ctx: policy.ProviderContext, client: ComfyUIClient, prompt_id: str
) -> dict[str, Any] | None:
    """The history entry of a prompt that finished while no one waited for it (after a
    restart), None if it has not; a failed one is forgotten (a retry queues afresh) and
    raised."""
    entry = await client.history(prompt_id)
    if entry is not None:
        failure = _failure_of(entry)
        if failure is not None:
            await policy.forget_job(ctx)
            raise failure
    return entry


def execution_error(data: Any) -> NodeFailure:
    """ComfyUI's ``execution_error``, quoted: the node, its class, the exception."""
    data = data if isinstance(data, dict) else {}
    node, kind = data.get("node_id", "?"), data.get("node_type", "?")
    detail = str(data.get("exception_message") or "").strip()[:ERROR_QUOTE]
    exc = data.get("exception_type")
    return ProviderError(
        f"ComfyUI failed at node {node} ({kind}): " + (f"{exc}: {detail}" if exc else detail)
    )


async def wait_for(
    client: ComfyUIClient, prompt_id: str, connection: Any | None, tracker: Tracker
) -> dict[str, Any]:
    """The history entry of ``prompt_id`` once it has finished, following the server's
    messages on ``connection`` (a WebSocket, or None: poll). The history is looked at after
    a silence too, so a missed message never leaves the node waiting."""
    while True:
        if connection is None:
            await asyncio.sleep(POLL_INTERVAL)
        else:
            try:
                # Not asyncio.wait_for: before Python 3.12 it swallows a cancel that lands as
                # the message arrives, and the node would follow the prompt to its end.
                async with asyncio.timeout(SILENCE_CHECK):
                    raw = await connection.recv()
            except TimeoutError:
                raw = None
            except websockets.ConnectionClosed:
                connection, raw = None, None
            if raw is not None:
                message = _message(raw)
                if message is None:
                    continue  # a binary preview, or not ComfyUI's JSON
                kind, data = message
                if data.get("prompt_id") not in (None, prompt_id):
                    continue  # another prompt of the same client
                if kind == "execution_error":
                    raise execution_error(data)
                if kind == "execution_interrupted":
                    raise ProviderError("ComfyUI failed: the workflow was interrupted")
                if kind != "execution_success" and not (
                    kind == "executing" and data.get("node") is None
                ):
                    await tracker.on(kind, data)
                    continue
        entry = await client.history(prompt_id)
        if entry is not None:
            failure = _failure_of(entry)
            if failure is not None:
                raise failure
            return entry
        if connection is None and not await client.queued(prompt_id):
            raise ProviderError(
                f"ComfyUI failed: the server no longer knows prompt {prompt_id} (restarted?)"
            )


def _message(raw: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(raw, str):
        return None
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(message, dict) or not isinstance(message.get("data"), dict):
        return None
    return str(message.get("type")), message["data"]


# ----------------------------------------------------------------------------- the node


# A run, plus (for a video or a sound) the per-second rate of our own media nodes: the GPU
# is the account's; what is priced is the orchestration and the file converted and kept.
COSTS = {
    Kind.IMAGE: Cost(credits=10),
    Kind.VIDEO: Cost(credits=10, per_second=1),
    Kind.AUDIO: Cost(credits=10, per_second=1),
}


def _spec(type_: str, kind: Kind, title: str, made: str) -> NodeSpec:
    return policy.adapter_spec(
        type_,
        title,
        "Run a ComfyUI workflow (API format) on your ComfyUI server; bound inputs are put "
        f"into its nodes, and one output node's {made} is the result.",
        ComfyUIWorkflowParams if kind == Kind.IMAGE else ComfyUIWorkflowTimedParams,
        *(Input(name, Kind.TEXT, required=False) for name in TEXT_SLOTS),
        *(Input(name, Kind.IMAGE, required=False) for name in IMAGE_SLOTS),
        output=kind,
        cost=COSTS[kind],
        credential_kinds=(CREDENTIAL_KIND,),
        cacheable=False,
    )


class ComfyUIWorkflow(NodeType):
    """Keeps an image (a still: ``SaveImage``, ``PreviewImage``); the subclasses keep a
    video or a sound, by the same params (see comfyui_outputs.py)."""

    spec = _spec("ComfyUIWorkflow", Kind.IMAGE, "ComfyUI workflow", "image")

    def param_problems(self, params: ComfyUIWorkflowParams) -> list[ParamProblem]:
        return workflow_problems(params)

    async def run(
        self, ctx: NodeContext, params: ComfyUIWorkflowParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        pctx = policy.provider_context(ctx)
        credential = policy.require_credential(pctx, CREDENTIAL_KIND)
        fleet = comfyui_fleet.fleet_of(ctx.settings, credential)
        if fleet is not None:
            return await on_fleet(pctx, fleet, params, inputs, self.spec.output.kind)
        base_url = credential.value("base_url")
        if not base_url:
            raise NodeFailure("the comfyui credential has no base_url", "invalid_credential")
        async with policy.Provider(
            ctx.settings,
            name="ComfyUI",
            base_url=base_url,
            headers=auth_headers(credential),
            secrets=tuple(credential.secret.values()),
            connections=pctx.connections,
        ) as api:
            client = ComfyUIClient(api)
            entry = await follow(pctx, client, params, inputs)
            output = params.output
            return await fetch_output(
                pctx,
                client,
                entry,
                self.spec.output.kind,
                output.node if output is not None else None,
                output.index if output is not None else 0,
            )


class ComfyUIWorkflowVideo(ComfyUIWorkflow):
    """Keeps a video: VideoHelperSuite's ``VHS_VideoCombine``, core ``SaveVideo``,
    ``SaveWEBM``, ``SaveAnimatedWEBP``/``PNG``; made H.264 MP4."""

    spec = _spec("ComfyUIWorkflowVideo", Kind.VIDEO, "ComfyUI workflow (video)", "video")


class ComfyUIWorkflowAudio(ComfyUIWorkflow):
    """Keeps a sound: ``SaveAudio`` (FLAC), ``SaveAudioMP3``, ``SaveAudioOpus``; made MP3."""

    spec = _spec("ComfyUIWorkflowAudio", Kind.AUDIO, "ComfyUI workflow (audio)", "sound")


def request_of(params: ComfyUIWorkflowParams, inputs: Mapping[str, InputValue]) -> Any:
    """What identifies a submission (the same after a crash): the params and the content
    hashes of the bound inputs."""
    hashes = {
        name: [v.sha256 for v in (value if isinstance(value, list) else [value])]
        for name, value in inputs.items()
        if value is not None
    }
    return {"params": params.model_dump(mode="json"), "inputs": hashes}


async def follow(
    ctx: policy.ProviderContext,
    client: ComfyUIClient,
    params: ComfyUIWorkflowParams,
    inputs: Mapping[str, InputValue],
) -> dict[str, Any]:
    """The history entry of the finished prompt: the one an earlier attempt of this node run
    queued (after a crash: attached to, never queued twice), else a new one. The prompt id
    is chosen here and stored on the node run (committed) before it is queued."""
    fingerprint = policy.request_fingerprint(request_of(params, inputs))
    known = ctx.remembered_job
    job: dict[str, Any] | None = None
    if (
        isinstance(known, dict)
        and known.get("provider") == PROVIDER
        and known.get("request") == fingerprint
        and known.get("id")
    ):
        job = dict(known)
    tracker = Tracker(ctx, total=len(params.workflow))
    async with contextlib.AsyncExitStack() as stack:
        if job is not None:
            prompt_id, client_id = str(job["id"]), str(job.get("client_id") or _client_id())
            entry = await _finished_unwatched(ctx, client, prompt_id)
            if entry is not None:
                return entry
            if await client.queued(prompt_id):
                ws = await _listen(stack, client, client_id)
                await stack.enter_async_context(_cancelling(ctx, client, prompt_id))
                return await wait_for(client, prompt_id, ws, tracker)
            # It never reached the server (the process stopped between storing the id and
            # queueing it), or the server lost it: queue it now, under the same id.
        else:
            prompt_id, client_id = str(uuid.uuid4()), _client_id()
        prompt = await bound_prompt(client, params, inputs)
        stored = {
            "id": prompt_id,
            "client_id": client_id,
            "provider": PROVIDER,
            "request": fingerprint,
        }
        await ctx.remember_job(stored)
        ws = await _listen(stack, client, client_id)  # before queueing: no message is missed

        async def queue() -> str:
            try:
                answered = await client.submit(prompt, client_id, prompt_id)
            except ProviderError:
                await policy.forget_job(ctx)  # refused: a retry queues afresh
                raise
            if answered != prompt_id:  # a server that ignores a caller's id
                await ctx.remember_job({**stored, "id": answered})
            return answered

        # A cancel while the prompt is being queued interrupts it once ComfyUI has it (an
        # interrupt sent before would miss it), and one just after is read from the run.
        queued = await policy.submitted(ctx, queue, client.cancel)
        await stack.enter_async_context(_cancelling(ctx, client, queued))
        return await wait_for(client, queued, ws, tracker)


def _client_id() -> str:
    return f"nodeloom-{uuid.uuid4().hex}"


@contextlib.asynccontextmanager
async def _cancelling(
    ctx: policy.ProviderContext, client: ComfyUIClient, prompt_id: str
) -> AsyncIterator[None]:
    """Around the wait: a ComfyUI failure forgets the job (a retry queues afresh); our run
    cancelled interrupts the prompt and deletes it from the queue, before the WebSocket
    closes (a server merely stopping leaves it running: the next process attaches)."""
    try:
        async with policy.cancelling(ctx, lambda: client.cancel(prompt_id)):
            yield
    except ProviderError:
        await policy.forget_job(ctx)
        raise


async def _listen(
    stack: contextlib.AsyncExitStack, client: ComfyUIClient, client_id: str
) -> Any | None:
    """The server's WebSocket for ``client_id``, or None (the node then polls the history)."""
    try:
        return await stack.enter_async_context(client.websocket(client_id))
    except (OSError, websockets.InvalidHandshake, websockets.InvalidURI, TimeoutError):
        return None


async def bound_prompt(
    client: ComfyUIClient | None,
    params: ComfyUIWorkflowParams,
    inputs: Mapping[str, InputValue],
) -> dict[str, Any]:
    """The workflow with the connected inputs put where the bindings say (images uploaded;
    with no ``client``, images left as the workflow has them)."""
    prompt: dict[str, Any] = json.loads(json.dumps(params.workflow))
    uploaded: dict[str, str] = {}
    for binding in params.bindings:
        value = inputs.get(binding.source)
        if value is None:
            continue
        ref = value[0] if isinstance(value, list) else value
        target = prompt[binding.node]["inputs"]
        if binding.type == "image":
            if client is None:
                continue
            if binding.source not in uploaded:
                data = await asyncio.to_thread(ref.read_bytes)
                name = f"nodeloom-{ref.sha256[:32]}.png"
                uploaded[binding.source] = await client.upload_image(name, data)
            target[binding.input] = uploaded[binding.source]
        else:
            text = await asyncio.to_thread(ref.read_text)
            target[binding.input] = _number(text, binding) if binding.type == "number" else text
    return prompt


# ----------------------------------------------------------------------------- a fleet


async def on_fleet(
    ctx: policy.ProviderContext,
    fleet: comfyui_fleet.Fleet,
    params: ComfyUIWorkflowParams,
    inputs: Mapping[str, InputValue],
    kind: Kind,
) -> Produced:
    """The prompt run on one server of ``fleet`` (comfyui_fleet.py): the one that holds it
    after a restart, else one with its nodes and models and the shortest queue. The prompt
    id is stored on the node run before a slot is taken, so that between a slot freeing and
    the prompt reaching ComfyUI there is only the POST (the server is recorded after it; a
    prompt stored without one is looked for by its id after a restart). A server that stops
    answering while it holds the prompt is left for another, and the node run's job records
    it (``resubmitted``: each server left, its prompt id, why)."""
    needs = comfyui_fleet.needs_of(await bound_prompt(None, params, inputs))
    fingerprint = policy.request_fingerprint(request_of(params, inputs))
    known = ctx.remembered_job if isinstance(ctx.remembered_job, dict) else {}
    ours = (
        known.get("provider") == PROVIDER
        and known.get("request") == fingerprint
        and bool(known.get("id"))
    )
    resubmitted: list[dict[str, Any]] = list(known.get("resubmitted") or []) if ours else []
    lost: set[str] = set()
    server: comfyui_fleet.Server | None = None
    if ours:
        job = dict(known)
        holder = known.get("server")
        if isinstance(holder, str):
            server = fleet.take(holder, ctx.account_id)
            if server is None:
                lost.add(holder)
                resubmitted.append(
                    {
                        "server": known.get("server_name") or holder,
                        "prompt_id": known.get("id"),
                        "reason": "not answering (or no longer listed) when the node resumed",
                    }
                )
                job = await _fresh(ctx, fingerprint, resubmitted)
        else:
            server = await fleet.holder_of(str(job["id"]), ctx.account_id)
            if server is not None:
                job["server"] = server.url
    else:
        job = await _fresh(ctx, fingerprint, resubmitted)
    while True:
        if server is None:
            server = await fleet.lease(ctx.account_id, needs, lost)
        leased, server = server, None
        try:
            try:
                client = ComfyUIClient(await fleet.api(leased))
                entry = await _run_on(ctx, fleet, leased, client, params, inputs, job)
            finally:
                # Done (or failed): the slot goes to the next prompt while the file comes.
                fleet.release(leased, ctx.account_id)
            output = params.output
            return await fetch_output(
                ctx,
                client,
                entry,
                kind,
                output.node if output is not None else None,
                output.index if output is not None else 0,
            )
        except (ProviderError, httpx.HTTPError, OSError) as exc:
            # A server that stopped answering, before the prompt ended or before its file
            # was fetched, is left for another; one that answers failed the workflow.
            if await fleet.answers(leased):
                raise
            reason = exc.message if isinstance(exc, NodeFailure) else type(exc).__name__
            lost.add(leased.url)
            resubmitted.append({"server": leased.name, "prompt_id": job["id"], "reason": reason})
            job = await _fresh(ctx, fingerprint, resubmitted)


async def _fresh(
    ctx: policy.ProviderContext, fingerprint: str, resubmitted: list[dict[str, Any]]
) -> dict[str, Any]:
    """A new prompt id for the node run, stored (committed) before a slot is taken."""
    job: dict[str, Any] = {"id": str(uuid.uuid4()), "provider": PROVIDER, "request": fingerprint}
    if resubmitted:
        job["resubmitted"] = list(resubmitted)
    await ctx.remember_job(job)
    return job


async def _run_on(
    ctx: policy.ProviderContext,
    fleet: comfyui_fleet.Fleet,
    server: comfyui_fleet.Server,
    client: ComfyUIClient,
    params: ComfyUIWorkflowParams,
    inputs: Mapping[str, InputValue],
    job: dict[str, Any],
) -> dict[str, Any]:
    """The history entry of ``job``'s prompt once it has finished on ``server``: attached
    to if the server has it (``job`` names the server: after a restart), else queued under
    the fleet's client id for the server, followed on its shared WebSocket."""
    prompt_id = str(job["id"])
    tracker = Tracker(ctx, total=len(params.workflow))
    async with contextlib.AsyncExitStack() as stack:
        if job.get("server") == server.url:
            entry = await _finished_unwatched(ctx, client, prompt_id)
            if entry is not None:
                return entry
            if await client.queued(prompt_id):
                # Its messages go to the client id it was queued with (a WebSocket of ours
                # before the restart, maybe another process's): listen as that one.
                ws = await _listen(stack, client, str(job.get("client_id") or _client_id()))
                await stack.enter_async_context(_cancelling(ctx, client, prompt_id))
                return await wait_for(client, prompt_id, ws, tracker)
            # It never reached the server, or the server lost it: queue it, under its id.
        prompt = await bound_prompt(client, params, inputs)
        listener = fleet.listener(server)
        subscription = await listener.subscribe(prompt_id)  # before the POST: none missed
        if subscription is not None:
            stack.callback(subscription.close)
        stored = {
            **job,
            "client_id": listener.client_id,
            "server": server.url,
            "server_name": server.name,
        }

        async def queue() -> str:
            try:
                answered = await client.submit(prompt, listener.client_id, prompt_id)
            except ProviderError:
                await policy.forget_job(ctx)  # refused: a retry queues afresh
                raise
            # Recorded once ComfyUI has it, while it works: not between slot and POST.
            await ctx.remember_job({**stored, "id": answered})
            return answered

        # A cancel while the prompt is being queued interrupts it once ComfyUI has it (an
        # interrupt sent before would miss it), and one just after is read from the run.
        queued = await policy.submitted(ctx, queue, client.cancel)
        if queued != prompt_id and subscription is not None:  # a server that ignores our id
            subscription.close()
            subscription = await listener.subscribe(queued)
            if subscription is not None:
                stack.callback(subscription.close)
        await stack.enter_async_context(_cancelling(ctx, client, queued))
        return await wait_for(client, queued, subscription, tracker)


NODES: list[NodeType] = [ComfyUIWorkflow(), ComfyUIWorkflowVideo(), ComfyUIWorkflowAudio()]
