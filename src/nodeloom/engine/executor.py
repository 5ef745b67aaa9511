"""Executing one node, whichever executor drives its run: look up the output cache, run the
node (in a sandbox process under its budget, or on the event loop for the few node types
that compute nothing), keep what it produced as an artifact, and say how it ended.

Nothing here touches run or node state: the caller records the ``Outcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import logging
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import orjson

from nodeloom import budget
from nodeloom.artifacts.store import ArtifactStore, StoredBlob
from nodeloom.auth.tokens import decrypt
from nodeloom.db.engine import Database
from nodeloom.db.models import utcnow
from nodeloom.engine import approvals, hook_signals, work
from nodeloom.engine.cache import cache_key
from nodeloom.engine.context import ProviderNodeContext, RunNodeContext
from nodeloom.engine.graph import GraphNode
from nodeloom.engine.run_state import ArtifactInfo, Outcome, RunState, artifact_info, failed
from nodeloom.engine.scratch import ScratchSpace
from nodeloom.events.bus import EventBus
from nodeloom.ids import uuid7
from nodeloom.metrics import Metrics
from nodeloom.nodes.adapters import hooks
from nodeloom.nodes.adapters.policy import Credential, ProviderConnections, Signals
from nodeloom.nodes.approval import APPROVAL_TYPE
from nodeloom.nodes.packages import PackagedNode
from nodeloom.nodes.providers import api_key as provider_key
from nodeloom.nodes.registry import Registry
from nodeloom.nodes.subworkflow import WORKFLOW_TYPE
from nodeloom.sandbox.fair import FairSlots
from nodeloom.sandbox.pool import NodeJob, SandboxPool
from nodeloom.sandbox.zygote import SandboxUnavailable
from nodeloom.sdk._node import (
    ArtifactRef,
    InputValue,
    NeedsSandbox,
    NodeFailure,
    Produced,
    StoredMedia,
)
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus
from nodeloom.store import Record, provider_jobs
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import assets as asset_store
from nodeloom.store import credentials as credential_store

log = logging.getLogger("nodeloom.engine")
# Seconds between two writes of one credential's ``last_used_at`` by a process (a minute, as
# API keys': auth/usage.py).
MARK_USED_EVERY = 60.0

Progress = Callable[[float], Awaitable[None]]
InputInfos = dict[str, ArtifactInfo | list[ArtifactInfo] | None]


class ChildRunner(Protocol):
    """What the executor asks of engine/child_runs.py, which sits above it (it accepts runs
    through engine/submit.py): run a ``Workflow`` node's child to its end."""

    async def run(self, task: NodeTask) -> Outcome: ...


@dataclass
class ExecutorEnv:
    """What executing nodes needs, built once per process."""

    settings: Settings
    db: Database
    registry: Registry
    store: ArtifactStore
    bus: EventBus
    slots: FairSlots  # nodes executing at once in this process, shared fairly by accounts
    metrics: Metrics
    sandbox: SandboxPool
    scratch: ScratchSpace
    # Runs the child of a Workflow node (engine/child_runs.py), once the process has an
    # acceptor; None: such nodes fail (a process that accepts no runs).
    children: ChildRunner | None = None
    # When this process last wrote each credential's ``last_used_at`` (monotonic seconds).
    credentials_marked: dict[str, float] = field(default_factory=dict)
    # Kept-alive connections to provider APIs, shared by this process's provider node runs.
    connections: ProviderConnections = field(default_factory=ProviderConnections)


@dataclass(frozen=True)
class NodeTask:
    """One node of one run, with everything needed to execute it."""

    run_id: str
    account_id: str
    plan: str
    node: GraphNode
    inputs: InputInfos
    run_input: dict[str, Any] | None
    use_cache: bool
    # A ForEach: the node runs each of its items adds (its region's nodes and the item's
    # own entry), counted against the run's work bound (engine/work.py). 0 for other nodes.
    per_item: int = 0

    @classmethod
    def of(cls, state: RunState, node_id: str) -> NodeTask:
        """Node ``node_id`` of the run ``state`` describes, with its inputs as they are."""
        region = state.graph.batches.regions.get(node_id)
        if region is not None and region.repeat:
            region = None  # its iterations are bounded by repeat_max_iterations
        return cls(
            run_id=state.run_id,
            account_id=state.account_id,
            plan=state.plan,
            node=state.graph.nodes[node_id],
            inputs=state.inputs_of(node_id),
            run_input=state.run_input,
            # An iteration runs again to produce something new: no stored output.
            use_cache=state.use_cache and not state.graph.batches.in_repeat(node_id),
            per_item=len(region.nodes) + 1 if region is not None else 0,
        )


async def _no_progress(_fraction: float) -> None:
    return None


def cached(node_id: str, hit: Any, key: str) -> Outcome:
    """A node completed by reusing the artifact ``hit`` (a row of ``artifacts``)."""
    artifact = artifact_info(hit)
    return Outcome(node_id, NodeStatus.COMPLETED, utcnow(), artifact, cached=True, cache_key=key)


async def still_stored(store: ArtifactStore, hit: Any) -> bool:
    """Whether the bytes of the artifact row ``hit`` are still there to reuse (a row that
    holds them has them)."""
    return hit.data is not None or await store.exists(hit.sha256)


def _crashed(task: NodeTask, exc: Exception) -> Outcome:
    """A node that raised what no node should (a bug): logged, and failed as internal."""
    node = task.node
    log.exception("node %s (%s) of run %s crashed", node.id, node.type, task.run_id, exc_info=exc)
    return failed(node.id, "internal_error", f"the node failed: {type(exc).__name__}", utcnow())


def _job_input(value: InputValue) -> Any:
    """An input as a sandbox job carries it (plain JSON: bytes kept in the database travel as
    the file ``_write_inline`` made of them)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_job_input(v) for v in value]
    fields = dataclasses.asdict(value)
    del fields["data"]
    return {**fields, "path": str(value.path)}


def _write_inline(inputs: dict[str, InputValue], scratch: Path) -> None:
    """Inputs kept in the database, as files in the node's scratch directory (a sandbox
    process reads its inputs from files)."""
    for value in inputs.values():
        for ref in value if isinstance(value, list) else [value]:
            if ref is not None and ref.data is not None and not ref.path.exists():
                scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
                ref.path.write_bytes(ref.data)


# A text output up to this size is kept in its artifact row, written in the transaction that
# records it: no file to create (the costliest part of a text node), nothing to fsync.
INLINE_TEXT_BYTES = 64 * 1024
TEXT = "text/plain"


# A node runs inline only if its inputs are this small: reading them happens on the loop.
INLINE_INPUT_BYTES = 256 * 1024


def small_inputs(inputs: InputInfos) -> bool:
    total = 0
    for value in inputs.values():
        for info in value if isinstance(value, list) else [value]:
            total += info.size_bytes if info is not None else 0
    return total <= INLINE_INPUT_BYTES


class NodeExecutor:
    def __init__(self, env: ExecutorEnv) -> None:
        self.env = env

    def key_of(self, task: NodeTask, credential: Record | None = None) -> str | None:
        """The node's output-cache key (None: never reused). With a ``credential``, its
        endpoint takes the operator provider's place in the fingerprint (its id is among the
        params); its secret never enters the key, so rotating it keeps the cached answers."""
        node = task.node
        hashes = {
            # "": an item a collector gathers that did not complete.
            name: [
                v.sha256 if v is not None else ""
                for v in (value if isinstance(value, list) else [value])
            ]
            for name, value in task.inputs.items()
            if value is not None
        }
        settings = self.env.settings
        if credential is not None:
            endpoint = credential.fields.get("base_url") or credential.kind
            settings = settings.model_copy(update={"provider_base_url": endpoint})
        fingerprint = node.node.fingerprint(node.params, settings)
        read = (
            node.node.run_input_read(node.params, task.run_input)
            if node.node.spec.uses_run_input
            else None
        )
        return cache_key(node.node.spec, fingerprint, hashes, read)

    async def credential_of(self, task: NodeTask) -> Record | None:
        """The credential the node names (a row of ``credentials``), or None when it names
        none; NodeFailure when its account has no such credential of a kind the node takes
        (``NodeSpec.credential_kinds``; deleted since, say)."""
        credential_id = getattr(task.node.params, "credential", None)
        if not credential_id:
            return None
        account_id = task.account_id
        kinds = task.node.node.spec.credential_kinds
        row = await self.env.db.read(lambda c: credential_store.get(c, account_id, credential_id))
        if row is None or row.kind not in kinds:
            raise NodeFailure(
                f"no {' or '.join(kinds)} credential {credential_id} in this account",
                "invalid_credential",
            )
        return row

    async def _hand_over(self, credential: Record | None) -> dict[str, str] | None:
        """The credential as the sandbox job carries it, decrypted here, just before; its
        ``last_used_at`` is set (a run uses it now)."""
        if credential is None:
            return None
        secret = await self._decrypted(credential)
        return {"kind": credential.kind, "base_url": credential.fields["base_url"], **secret}

    async def _decrypted(self, credential: Record) -> dict[str, str]:
        """The credential's secret fields; its ``last_used_at`` is set (a run uses it now,
        exact to ``MARK_USED_EVERY``)."""
        plain = decrypt(self.env.settings.secret, credential.secret_encrypted)
        if plain is None:
            raise NodeFailure(
                f"credential {credential.id} does not decrypt with this server's secret; "
                "set its secret again",
                "invalid_credential",
            )
        await self._mark_used(credential.id)
        secret: dict[str, str] = orjson.loads(plain)
        return secret

    async def _mark_used(self, credential_id: str) -> None:
        """``last_used_at`` written on a credential's first use by this process, then at
        most every MARK_USED_EVERY seconds: 500 runs started at once on one credential were
        500 writes of its one row (issue #36), as API keys are not (auth/usage.py)."""
        now, marked = time.monotonic(), self.env.credentials_marked
        if now - marked.get(credential_id, -MARK_USED_EVERY) < MARK_USED_EVERY:
            return
        marked[credential_id] = now
        await self.env.db.write(lambda c: credential_store.mark_used(c, credential_id))

    async def reuse(self, task: NodeTask, key: str | None) -> Outcome | None:
        """The node completed with a stored output of the same key (the run allowing it), if
        there is one whose bytes are still there."""
        if key is None or not task.use_cache:
            return None
        account_id = task.account_id
        hit = await self.env.db.read(lambda c: artifact_store.cached(c, account_id, key))
        if hit is not None and await still_stored(self.env.store, hit):
            return cached(task.node.id, hit, key)
        return None

    async def execute(
        self, task: NodeTask, progress: Progress, waiting: approvals.Announce | None = None
    ) -> Outcome:
        """Execute the node of ``task``. ``waiting``: how an Approval node announces, in its
        run's events, that it waits for a person (engine/approvals.py)."""
        env = self.env
        node = task.node
        if node.type == APPROVAL_TYPE:
            # A person's decision, waited for on the event loop: no sandbox process, no slot.
            try:
                produced = await approvals.wait(
                    approvals.Waiting(env.db, env.bus, env.settings),
                    task.account_id,
                    task.run_id,
                    node,
                    task.inputs.get("input"),
                    waiting,
                )
                return await self._keep(task, produced, None)
            except NodeFailure as exc:
                return failed(node.id, exc.code, exc.message, utcnow())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return _crashed(task, exc)
        if node.type == WORKFLOW_TYPE:
            # A child run, waited for on the event loop: no sandbox process, no slot.
            if env.children is None:
                message = "this process cannot start sub-workflow runs"
                return failed(node.id, "internal_error", message, utcnow())
            try:
                return await env.children.run(task)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return _crashed(task, exc)
        try:
            credential = await self.credential_of(task)
        except NodeFailure as exc:
            return failed(node.id, exc.code, exc.message, utcnow())
        key = self.key_of(task, credential)
        reused = await self.reuse(task, key)
        if reused is not None:
            return reused
        scratch = env.scratch.node_dir()
        try:
            kind = credential.kind if credential is not None else None
            if node.node.waits_on_provider(node.params, env.settings, kind):
                # Waiting on a provider holds no slot: only its CPU work takes one (_convert).
                produced = await asyncio.wait_for(
                    self._provide(task, scratch, progress, credential),
                    env.settings.node_timeout_seconds,
                )
            else:
                async with env.slots.hold(task.account_id):
                    produced = await asyncio.wait_for(
                        self._produce(task, scratch, progress, credential),
                        env.settings.node_timeout_seconds,
                    )
            await self._within_work(task, produced)
            return await self._keep(task, produced, key)
        except NodeFailure as exc:
            return failed(node.id, exc.code, exc.message, utcnow())
        except TimeoutError:
            limit = env.settings.node_timeout_seconds
            return failed(
                node.id, "node_timeout", f"the node took longer than {limit:g} s", utcnow()
            )
        except SandboxUnavailable as exc:
            log.error("node %s of run %s could not start: %s", node.id, task.run_id, exc)
            return failed(node.id, "internal_error", "the node could not be started", utcnow())
        except Exception as exc:
            return _crashed(task, exc)
        finally:
            if scratch.exists():
                await asyncio.to_thread(shutil.rmtree, scratch, True)

    async def execute_instant(self, task: NodeTask) -> Outcome:
        """An instant node (``NodeType.instant``), right here and without a cache look-up
        (the caller looks up a whole run's keys at once). It computes nothing that takes
        time, so no timeout, execution slot or scratch directory is set up for it. Raises
        NeedsSandbox when it turns out to need one after all."""
        return await self._instant(task, self.key_of(task))

    async def execute_instant_keyed(self, task: NodeTask, key: str | None) -> Outcome:
        """``execute_instant`` of a node whose cache key (``key_of``) the caller has."""
        return await self._instant(task, key)

    async def execute_in_step(self, task: NodeTask) -> Outcome | None:
        """An instant node within the step that started it (the in-process driver): its
        stored output when the run reuses outputs, else executed as ``execute_instant`` does;
        None when it turns out to need a sandbox (the caller then runs it with ``execute``,
        as a task of its own)."""
        key = self.key_of(task)
        reused = await self.reuse(task, key)
        if reused is not None:
            return reused
        try:
            return await self._instant(task, key)
        except NeedsSandbox:
            return None

    async def _instant(self, task: NodeTask, key: str | None) -> Outcome:
        node = task.node
        scratch = self.env.scratch.node_dir()  # a path only: nothing here writes there
        ctx = self._context(task, scratch, _no_progress)
        try:
            produced = await node.node.run(ctx, node.params, await self._inputs(task, scratch))
            await self._within_work(task, produced)
            return await self._keep(task, produced, key)
        except NodeFailure as exc:
            return failed(node.id, exc.code, exc.message, utcnow())
        except NeedsSandbox:
            raise
        except Exception as exc:
            return _crashed(task, exc)

    def _context(self, task: NodeTask, scratch: Path, report: Progress) -> RunNodeContext:
        """What a node running on the event loop (not in a sandbox) is given."""
        return RunNodeContext(
            run_id=task.run_id,
            node_id=task.node.id,
            account_id=task.account_id,
            run_input=task.run_input,
            settings=self.env.settings,
            report=report,
            scratch=scratch,
            find_media=functools.partial(self._find_media, task.account_id),
        )

    async def _find_media(self, account_id: str, reference: str) -> StoredMedia | None:
        row = await self.env.db.read(lambda c: asset_store.media_of(c, account_id, reference))
        if row is None:
            return None
        return StoredMedia(
            row.sha256, row.size_bytes, row.content_type, row.width, row.height, row.duration_ms
        )

    async def _inputs(self, task: NodeTask, scratch: Path) -> dict[str, InputValue]:
        """Input artifacts as local files (a download when the store is remote), or as the
        bytes their row holds (written under ``scratch`` only if a sandbox needs them)."""
        store = self.env.store

        async def ref(info: ArtifactInfo) -> ArtifactRef:
            inline = info.data is not None
            return ArtifactRef(
                artifact_id=info.id,
                content_type=info.content_type,
                sha256=info.sha256,
                size_bytes=info.size_bytes,
                path=scratch / f"input-{info.sha256}"
                if inline
                else await store.local_path(info.sha256),
                width=info.width,
                height=info.height,
                duration_ms=info.duration_ms,
                data=info.data,
            )

        values: dict[str, InputValue] = {}
        for name, value in task.inputs.items():
            if value is None:
                values[name] = None
            elif isinstance(value, list):
                # None: an item a collector gathers that did not complete (nodes/batch.py).
                values[name] = cast(
                    list[ArtifactRef], [await ref(v) if v is not None else None for v in value]
                )
            else:
                values[name] = await ref(value)
        return values

    async def _provide(
        self, task: NodeTask, scratch: Path, progress: Progress, credential: Record | None
    ) -> Produced:
        """Run a provider node (``NodeSpec.adapter``) here, on the event loop, under its time
        budget: it waits on its provider (I/O) and sends its CPU work to a sandbox process
        (``_convert``). It gets the credential it names, decrypted, and the provider job an
        earlier attempt of this node run stored (see nodes/adapters/policy.py)."""
        env = self.env
        node = task.node
        spec = node.node.spec
        run_id, node_id = task.run_id, node.id
        limits = self._budget(task, spec.type, spec.category)
        remembered = await env.db.read(lambda c: provider_jobs.get(c, run_id, node_id))
        adapter_credential = None
        if credential is not None:
            adapter_credential = Credential(
                id=credential.id,
                kind=credential.kind,
                fields=dict(credential.fields),
                secret=await self._decrypted(credential),
            )

        async def remember(job: dict[str, Any] | None) -> None:
            await env.db.write(lambda c: provider_jobs.remember(c, run_id, node_id, job))

        async def cancelled() -> bool:
            return await env.db.read(lambda c: provider_jobs.run_cancelled(c, run_id))

        async def convert(path: Path, kind: str) -> Produced:
            return await self._convert(task, scratch, path, kind)

        def hook_url(provider: str) -> str | None:
            return hooks.hook_url(env.settings, provider, run_id, node_id)

        async def stored_job() -> dict[str, Any] | None:
            return await env.db.read(lambda c: provider_jobs.get(c, run_id, node_id))

        @contextlib.asynccontextmanager
        async def signals() -> AsyncIterator[Signals]:
            with hook_signals.waiter(env.bus, task.account_id, run_id, node_id) as waiter:
                yield waiter

        ctx = ProviderNodeContext(
            credential=adapter_credential,
            remembered_job=remembered,
            remember=remember,
            cancelled=cancelled,
            convert=convert,
            deadline=asyncio.get_running_loop().time() + limits.wall_seconds,
            hook_url=hook_url,
            stored_job=stored_job,
            signals=signals,
            connections=env.connections,
            run_id=run_id,
            node_id=node_id,
            account_id=task.account_id,
            run_input=task.run_input,
            settings=env.settings,
            report=progress,
            scratch=scratch,
        )
        inputs = await self._inputs(task, scratch)
        try:
            async with asyncio.timeout(limits.wall_seconds):
                return await node.node.run(ctx, node.params, inputs)
        except TimeoutError:
            raise NodeFailure(
                f"the provider did not finish within the node's time budget of "
                f"{limits.wall_seconds:g} s",
                "node_timeout",
            ) from None

    async def _convert(self, task: NodeTask, scratch: Path, path: Path, kind: str) -> Produced:
        """A provider node's download made into an artifact, in a sandbox process, under the
        budget of the media category it becomes (image, audio, video)."""
        if not path.is_relative_to(scratch) or ".." in path.parts:
            raise NodeFailure("a provider node converts only its own files", "internal_error")
        spec = task.node.node.spec
        category = kind if kind in ("image", "audio", "video") else "utility"
        limits = self._budget(task, spec.type, category)
        async with self.env.slots.hold(task.account_id):
            return await self.env.sandbox.convert(path, kind, scratch, limits, task.account_id)

    def _budget(self, task: NodeTask, node_type: str, category: str) -> budget.Budget:
        settings = self.env.settings
        return budget.resolve(
            node_type,
            category,
            task.plan,
            overrides=settings.node_budgets,
            plan_caps=settings.plan_budgets,
            timeout_seconds=settings.node_timeout_seconds,
        )

    async def _produce(
        self, task: NodeTask, scratch: Any, progress: Progress, credential: Record | None = None
    ) -> Produced:
        """Run the node: in a sandbox process under its budget, or — for the few types that
        compute nothing — right here. A node with a ``credential`` calls a provider, which
        it does only in a sandbox process: the secret goes to that job alone."""
        env = self.env
        node = task.node
        spec = node.node.spec
        inputs = await self._inputs(task, scratch)
        if node.node.batch_role == "for_each" and not small_inputs(task.inputs):
            # A ForEach splits on the loop (its item count comes back with its output).
            raise NodeFailure(
                f"a ForEach's list is at most {INLINE_INPUT_BYTES // 1024} KiB", "batch_too_large"
            )
        if node.node.runs_inline(node.params) and small_inputs(task.inputs):
            try:
                return await node.node.run(
                    self._context(task, scratch, progress), node.params, inputs
                )
            except NeedsSandbox:
                if not spec.sandboxed:
                    raise
        _write_inline(inputs, scratch)
        job = NodeJob(
            type=spec.type,
            params=node.params.model_dump(mode="json"),
            inputs={name: _job_input(value) for name, value in inputs.items()},
            run_input=task.run_input,
            run_id=task.run_id,
            node_id=node.id,
            account_id=task.account_id,
            scratch=scratch,
            provider_key=provider_key(env.settings)
            if spec.calls_provider and credential is None
            else None,
            credential=await self._hand_over(credential),
            package=isinstance(node.node, PackagedNode),
        )
        settings = env.settings
        limits = budget.resolve(
            spec.type,
            spec.category,
            task.plan,
            overrides=settings.node_budgets,
            plan_caps=settings.plan_budgets,
            timeout_seconds=settings.node_timeout_seconds,
        )
        return await env.sandbox.run_node(job, limits, progress)

    async def _within_work(self, task: NodeTask, produced: Produced) -> None:
        """A ForEach whose items would take its run's tree of runs past ``run_max_work``
        fails (engine/work.py) instead of adding them."""
        if produced.items is None or not task.per_item:
            return
        adding = produced.items * task.per_item
        limit = self.env.settings.run_max_work
        so_far = await self.env.db.read(lambda c: work.tree_work(c, task.run_id))
        why = work.over(limit, so_far, adding)
        if why is not None:
            raise NodeFailure(f"{produced.items} items: {why}", work.RUN_TOO_LARGE)

    async def _keep(self, task: NodeTask, produced: Produced, key: str | None) -> Outcome:
        """The produced bytes as an artifact: in the store, or (small text) carried to the
        row the caller's transaction writes."""
        node = task.node
        store = self.env.store
        limit = self.env.settings.max_artifact_bytes
        content_type = node.node.spec.output.content_type
        inline: bytes | None = None
        if produced.data is not None:
            if len(produced.data) > limit:
                raise NodeFailure(f"the output is larger than {limit} bytes", "output_too_large")
            if content_type == TEXT and len(produced.data) <= INLINE_TEXT_BYTES:
                inline = produced.data
                blob = StoredBlob(hashlib.sha256(inline).hexdigest(), len(inline))
            else:
                blob = await store.put_bytes(produced.data)
        elif produced.path is not None:
            if produced.path.stat().st_size > limit:
                raise NodeFailure(f"the output is larger than {limit} bytes", "output_too_large")
            blob = await store.put_file(produced.path)
        elif produced.stored is not None:
            blob = StoredBlob(produced.stored.sha256, produced.stored.size_bytes)
        else:
            raise NodeFailure("the node produced no output", "no_output")
        artifact = ArtifactInfo(
            id=uuid7(),
            content_type=content_type,
            size_bytes=blob.size_bytes,
            sha256=blob.sha256,
            width=produced.width,
            height=produced.height,
            duration_ms=produced.duration_ms,
            data=inline,
        )
        return Outcome(
            node.id,
            NodeStatus.COMPLETED,
            utcnow(),
            artifact,
            new_artifact=True,
            credits=node.node.charge_for(node.params, produced, self.env.settings, _input_ms(task)),
            cache_key=key,
            items=produced.items,
            ports=produced.ports,
        )


def _input_ms(task: NodeTask) -> int | None:
    """The length of the input a node's price follows (``NodeType.length_input``), if
    known."""
    name = task.node.node.length_input
    value = task.inputs.get(name) if name is not None else None
    return value.duration_ms if isinstance(value, ArtifactInfo) else None
