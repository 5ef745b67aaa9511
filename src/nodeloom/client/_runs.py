"""A run as the client holds it: wait for it (WebSocket, polling as the fallback), its events,
its outputs and their download."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import anyio
from pydantic import BaseModel, PrivateAttr
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from nodeloom.client._session import Session
from nodeloom.client.errors import WaitTimeout, error_for
from nodeloom.events.model import FINAL_EVENTS, EventType
from nodeloom.schemas.runs import ArtifactMetadata, NodeRunOut, RunError, RunOut, RunSummary
from nodeloom.schemas.workflows import WorkflowOut
from nodeloom.states import NodeStatus, RunStatus

EXTENSIONS = {"text/plain": ".txt", "image/png": ".png", "audio/mpeg": ".mp3", "video/mp4": ".mp4"}
CLOSE_UNAUTHORIZED, CLOSE_TOO_SLOW = 4401, 4408
WS_RECONNECTS = 3
MAX_POLL_INTERVAL = 2.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def extension_for(content_type: str) -> str:
    return EXTENSIONS.get(content_type.split(";")[0].strip().lower(), ".bin")


class RunEvent(BaseModel):
    """One change of a run, as the server announces it (docs/events.md).

    ``seq`` counts from 1 per run. Events seen while polling (when no WebSocket could be
    opened) are derived from state changes between two polls: their ``seq`` and ``ts`` are
    None and there is no ``node.progress``.
    """

    type: str
    seq: int | None = None
    ts: datetime | None = None
    run_id: str
    workflow_id: str
    node_id: str | None = None
    data: dict[str, Any] = {}

    @property
    def final(self) -> bool:
        return self.type in FINAL_EVENTS


OnEvent = Callable[[RunEvent], object]


# Keyed by the types' strings: an event's type is a plain string (a newer server may send
# one this client does not know).
_NODE_STATUS_AFTER: dict[str, NodeStatus] = {
    EventType.NODE_STARTED: NodeStatus.RUNNING,
    EventType.NODE_WAITING: NodeStatus.WAITING,
    EventType.NODE_COMPLETED: NodeStatus.COMPLETED,
    EventType.NODE_FAILED: NodeStatus.FAILED,
    EventType.NODE_SKIPPED: NodeStatus.SKIPPED,
    EventType.NODE_CANCELLED: NodeStatus.CANCELLED,
}


def apply_event(run: RunOut, event: RunEvent) -> None:
    """Fold one event into ``run`` (in place): the one place in Python where events become
    run state (the CLI's live view reads its state from here). ``diff_events`` is its
    inverse: events folded onto the earlier state give the later one. Unknown types (from a
    newer server) and progress change nothing here."""
    data = event.data
    if event.type in FINAL_EVENTS:
        run.status = RunStatus(event.type.removeprefix("run."))
        run.credits_used = int(data.get("credits_used", run.credits_used))
        run.duration_ms = int(data.get("duration_ms", run.duration_ms))
        error = data.get("error")
        run.error = RunError.model_validate(error) if error else None
        return
    status = _NODE_STATUS_AFTER.get(event.type)
    item = data.get("item_index")
    node = next(
        (n for n in run.node_runs if n.node_id == event.node_id and n.item_index == item), None
    )
    if status is not None and node is None and item is not None and event.node_id:
        # An item's node run the record did not hold yet (docs/batches.md).
        node = _item_entry(run, event.node_id, int(item))
    if status is None or node is None:
        return
    node.status = status
    if status == NodeStatus.COMPLETED:
        node.artifact_id = data.get("artifact_id")
        node.credits_used = int(data.get("credits_used", 0))
        node.cached = bool(data.get("cached"))
        run.credits_used = sum(n.credits_used for n in run.node_runs)
    elif status == NodeStatus.FAILED:
        node.error = data.get("error")
    elif status == NodeStatus.SKIPPED:
        node.error = data.get("reason")


def _item_entry(run: RunOut, node_id: str, item: int) -> NodeRunOut:
    """A pending entry for item ``item`` of node ``node_id``, placed after the node's other
    entries (its type: that of a sibling entry, when the record has one)."""
    same = [i for i, n in enumerate(run.node_runs) if n.node_id == node_id]
    entry = NodeRunOut(
        node_id=node_id,
        item_index=item,
        type=run.node_runs[same[0]].type if same else "",
        status=NodeStatus.PENDING,
        artifact_id=None,
        credits_used=0,
        cached=False,
        started_at=None,
        finished_at=None,
        duration_ms=None,
        error=None,
    )
    run.node_runs.insert(same[-1] + 1 if same else len(run.node_runs), entry)
    return entry


def _output_key(node: NodeRunOut) -> str:
    """How outputs name a node run: its node id, ``<node id>.<item>`` for an item's."""
    return node.node_id if node.item_index is None else f"{node.node_id}.{node.item_index}"


def item_progress(run: RunOut) -> dict[str, tuple[int, int]]:
    """Per node run once per item: (items finished, items known), e.g. {"tts": (17, 40)}."""
    found: dict[str, tuple[int, int]] = {}
    for node in run.node_runs:
        if node.item_index is None:
            continue
        done, total = found.get(node.node_id, (0, 0))
        finished = node.status in ("completed", "failed", "skipped", "cancelled")
        found[node.node_id] = (done + finished, total + 1)
    return found


def diff_events(before: RunOut | None, after: RunOut) -> list[RunEvent]:
    """The events that explain how ``before`` became ``after`` (None: nothing had started)."""

    def event(type_: str, node_id: str | None = None, **data: Any) -> RunEvent:
        return RunEvent(
            type=type_, run_id=after.id, workflow_id=after.workflow_id, node_id=node_id, data=data
        )

    events = [] if before else [event("run.started", estimated_credits=after.estimated_credits)]
    seen = {(n.node_id, n.item_index): n.status for n in before.node_runs} if before else {}
    counts = item_progress(after)
    for node in after.node_runs:
        old = seen.get((node.node_id, node.item_index), "pending")
        if node.status == old:
            continue
        first = len(events)
        started = ("running", "waiting", "completed", "failed")
        if old in ("pending", "queued") and node.status in started:
            if not node.cached:
                events.append(event("node.started", node.node_id))
        if node.status == "waiting":
            # What the approval asks is not in a run record: GET /approvals has it.
            events.append(event("node.waiting", node.node_id))
        elif node.status == "completed":
            events.append(
                event(
                    "node.completed",
                    node.node_id,
                    artifact_id=node.artifact_id,
                    credits_used=node.credits_used,
                    cached=node.cached,
                )
            )
        elif node.status == "failed":
            events.append(event("node.failed", node.node_id, error=node.error))
        elif node.status == "skipped":
            events.append(event("node.skipped", node.node_id, reason=node.error))
        elif node.status == "cancelled":
            events.append(event("node.cancelled", node.node_id))
        if node.item_index is not None:
            for item_event in events[first:]:
                item_event.data["item_index"] = node.item_index
                item_event.data["item_count"] = counts[node.node_id][1]
    if after.status != "running" and (before is None or before.status == "running"):
        data: dict[str, Any] = {
            "credits_used": after.credits_used,
            "duration_ms": after.duration_ms,
        }
        if after.error is not None:
            data["error"] = after.error.model_dump()
        events.append(event(f"run.{after.status}", **data))
    return events


class _WebSocketUnavailable(Exception):
    """The WebSocket could not be used; polling takes over."""


class _Deadline:
    """When ``wait`` gives up: ``remaining()`` seconds, or ``WaitTimeout`` once past."""

    def __init__(self, run_id: str, seconds: float | None) -> None:
        self.run_id, self.seconds = run_id, seconds
        loop = asyncio.get_running_loop()
        self.at = None if seconds is None else loop.time() + seconds

    def remaining(self) -> float | None:
        if self.at is None:
            return None
        left = self.at - asyncio.get_running_loop().time()
        if left <= 0:
            raise self.expired()
        return left

    def expired(self) -> WaitTimeout:
        return WaitTimeout(self.run_id, self.seconds or 0)


class _RunCalls(Protocol):
    async def get(self, workflow_id: str, run_id: str) -> AsyncRun: ...

    async def cancel(self, workflow_id: str, run_id: str) -> RunSummary: ...

    async def retry(
        self,
        workflow_id: str,
        run_id: str,
        *,
        params: Mapping[str, Mapping[str, Any]] | None = None,
        cache: bool = True,
        current: bool = False,
    ) -> AsyncRun: ...


class _WorkflowCalls(Protocol):
    async def get(self, workflow_id: str) -> WorkflowOut: ...


class _ArtifactCalls(Protocol):
    async def metadata(self, artifact_id: str) -> ArtifactMetadata: ...

    async def download(self, artifact_id: str, to: str | os.PathLike[str]) -> Path: ...


class RunClient(Session, Protocol):
    """The client a run is bound to (``AsyncClient``): its requests, and the resources a
    run's own methods call (``refresh`` is ``runs.get``, ``outputs`` reads
    ``artifacts.metadata``...)."""

    @property
    def runs(self) -> _RunCalls: ...

    @property
    def workflows(self) -> _WorkflowCalls: ...

    @property
    def artifacts(self) -> _ArtifactCalls: ...


class AsyncRun(RunOut):
    """A run (every field of ``GET /workflows/{id}/runs/{run_id}``) bound to its client."""

    _client: Any = PrivateAttr()

    @classmethod
    def bind(cls, data: Any, client: RunClient) -> AsyncRun:
        run = cls.model_validate(data)
        run._client = client
        return run

    @property
    def done(self) -> bool:
        return self.status != "running"

    async def refresh(self) -> AsyncRun:
        """The run as it is now (a new object; this one is left as it was)."""
        client: RunClient = self._client
        return await client.runs.get(self.workflow_id, self.id)

    async def cancel(self) -> RunSummary:
        client: RunClient = self._client
        return await client.runs.cancel(self.workflow_id, self.id)

    async def retry(
        self,
        *,
        params: dict[str, dict[str, Any]] | None = None,
        cache: bool = True,
        current: bool = False,
    ) -> AsyncRun:
        """Retry this failed or cancelled run from where it stopped (``runs.retry``)."""
        client: RunClient = self._client
        return await client.runs.retry(
            self.workflow_id, self.id, params=params, cache=cache, current=current
        )

    async def wait(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - raises WaitTimeout, the run goes on
        on_event: OnEvent | None = None,
        *,
        use_websocket: bool = True,
        poll_interval: float = 0.5,
    ) -> AsyncRun:
        """Wait until the run is completed or failed and return it as it ended.

        ``on_event(event)`` is called with every ``RunEvent`` on the way. Raises
        ``WaitTimeout`` after ``timeout`` seconds (the run goes on). A failed run is returned,
        not raised: look at ``.status`` and ``.error``.
        """
        async for event in self.follow(
            timeout, use_websocket=use_websocket, poll_interval=poll_interval
        ):
            if on_event is not None:
                on_event(event)
        return await self.refresh()

    async def follow(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - raises WaitTimeout, the run goes on
        *,
        use_websocket: bool = True,
        poll_interval: float = 0.5,
    ) -> AsyncIterator[RunEvent]:
        """The run's events from its start until it ends: over the WebSocket (``/api/v1/ws``,
        replayed from seq 1, so nothing is missed), else by polling."""
        deadline = _Deadline(self.id, timeout)
        last_seq = 0
        if use_websocket:
            try:
                for _ in range(WS_RECONNECTS):
                    async for event in self._ws_events(last_seq, deadline):
                        last_seq = event.seq or last_seq
                        yield event
                        if event.final:
                            return
            except _WebSocketUnavailable:
                pass
        async for event in self._poll_events(last_seq > 0, deadline, poll_interval):
            yield event

    async def _ws_events(self, after_seq: int, deadline: _Deadline) -> AsyncIterator[RunEvent]:
        """Events over one WebSocket connection; returns if it closes early (4408: too slow)."""
        client: RunClient = self._client
        try:
            async with asyncio.timeout(deadline.remaining()):
                ws = await connect(
                    client.ws_url, additional_headers=client.auth_headers, open_timeout=10
                )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            deadline.remaining()
            raise _WebSocketUnavailable(str(exc)) from exc
        async with ws:
            subscribe = {"type": "subscribe", "run_id": self.id, "after_seq": after_seq}
            await ws.send(json.dumps(subscribe))
            while True:
                message = await self._receive(ws, deadline)
                if message is None:
                    return
                kind = message.get("type")
                if kind == "ping":
                    await ws.send('{"type": "pong"}')
                elif kind == "error":
                    status = 404 if message.get("code") == "not_found" else 400
                    raise error_for(status, message)
                elif "seq" in message:
                    yield RunEvent.model_validate(message)

    async def _receive(self, ws: ClientConnection, deadline: _Deadline) -> dict[str, Any] | None:
        try:
            async with asyncio.timeout(deadline.remaining()):
                raw = await ws.recv()
        except TimeoutError:
            raise deadline.expired() from None
        except ConnectionClosed as exc:
            closed = exc.rcvd
            if closed is not None and closed.code == CLOSE_UNAUTHORIZED:
                raise error_for(401, {"code": "unauthorized", "detail": closed.reason}) from exc
            if closed is not None and closed.code == CLOSE_TOO_SLOW:
                return None  # reconnect and resume after the last seq
            raise _WebSocketUnavailable(str(exc)) from exc
        message = json.loads(raw)
        return message if isinstance(message, dict) else {}

    async def _poll_events(
        self, started: bool, deadline: _Deadline, interval: float
    ) -> AsyncIterator[RunEvent]:
        before: RunOut | None = None
        if started:
            before = await self.refresh()
        while True:
            now = await self.refresh()
            for event in diff_events(before, now):
                yield event
            if now.done:
                return
            before = now
            remaining = deadline.remaining()
            await asyncio.sleep(interval if remaining is None else min(interval, remaining))
            interval = min(interval * 1.5, MAX_POLL_INTERVAL)

    # -- outputs ------------------------------------------------------------------------------

    async def output_node_ids(self, *, all_nodes: bool = False) -> list[str]:
        """The nodes whose artifacts are the run's output: those no edge leaves (the graph's
        sinks). Every node's artifact stays downloadable; ``all_nodes`` lists them all."""
        nodes = [_output_key(n) for n in self.node_runs if n.artifact_id]
        if all_nodes:
            return nodes
        client: RunClient = self._client
        workflow = await client.workflows.get(self.workflow_id)
        edges = workflow.graph_json.get("edges", [])
        sources = {e.get("source") for e in edges if isinstance(e, dict)}
        keys = [(_output_key(n), n.node_id) for n in self.node_runs if n.artifact_id]
        return [key for key, node_id in keys if node_id not in sources]

    async def outputs(self, *, all_nodes: bool = False) -> dict[str, ArtifactMetadata]:
        """Node id -> metadata of its artifact (content type, size, signed download URL), for
        the output nodes (see ``output_node_ids``); an item's node run of a batch is named
        ``<node id>.<item>``."""
        client: RunClient = self._client
        artifacts = {_output_key(n): n.artifact_id for n in self.node_runs if n.artifact_id}
        wanted = await self.output_node_ids(all_nodes=all_nodes)
        found = await asyncio.gather(*(client.artifacts.metadata(artifacts[n]) for n in wanted))
        return dict(zip(wanted, found, strict=True))

    async def download(self, directory: str | Path, *, all_nodes: bool = False) -> dict[str, Path]:
        """Save the outputs into ``directory`` as ``<node id>.<ext>``; node id -> file."""
        client: RunClient = self._client
        folder = Path(directory)
        await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
        saved: dict[str, Path] = {}
        for node_id, meta in (await self.outputs(all_nodes=all_nodes)).items():
            stem = _UNSAFE.sub("_", node_id).strip("._") or meta.id
            if any(p.stem == stem for p in saved.values()):
                stem = f"{stem}-{meta.id[:8]}"
            target = folder / f"{stem}{extension_for(meta.content_type)}"
            saved[node_id] = await client.artifacts.download(meta.id, target)
        return saved
