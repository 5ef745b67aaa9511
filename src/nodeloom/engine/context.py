"""What the executor hands a node that runs on the event loop (implements
nodes.base.NodeContext). Only nodes whose ``runs_inline`` says so run this way (they compute
nothing, or a bounded pass over their inputs); the rest run in a sandbox process with its own
context (sandbox/worker.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from nodeloom.nodes.adapters.policy import ProviderConnections, Signals
from nodeloom.sdk._node import StoredMedia
from nodeloom.settings import Settings

T = TypeVar("T")


class RunNodeContext:
    def __init__(
        self,
        *,
        run_id: str,
        node_id: str,
        account_id: str,
        run_input: Mapping[str, Any] | None,
        settings: Settings,
        report: Callable[[float], Awaitable[None]],
        scratch: Path,
        find_media: Callable[[str], Awaitable[StoredMedia | None]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.account_id = account_id
        self.input = run_input
        self.settings = settings
        self.inline = True
        self.credential_kind: str | None = None  # a node naming a credential runs sandboxed
        self._report = report
        self._scratch = scratch
        # An asset or artifact of the account by id (media input nodes), None: not its own.
        self.find_media = find_media

    @property
    def scratch_dir(self) -> Path:
        """Created on first use: most nodes never touch the disk."""
        self._scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self._scratch

    async def progress(self, fraction: float) -> None:
        await self._report(min(1.0, max(0.0, float(fraction))))

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)


class _Sleep:
    """No webhooks (a context built outside the executor): waiting is sleeping."""

    async def wait(self, most: float) -> bool:
        await asyncio.sleep(most)
        return False


Hooks = Callable[[], contextlib.AbstractAsyncContextManager[Signals]]


@contextlib.asynccontextmanager
async def _no_signals() -> AsyncIterator[Signals]:
    yield _Sleep()


class ProviderNodeContext(RunNodeContext):
    """The context of a provider node (``NodeSpec.adapter``; see nodes/adapters/policy.py):
    besides what every inline node gets, the account's credential it names (decrypted here,
    on the server, never sent to a sandbox), the provider job it stored on its node run,
    a way to store one (committed before it returns), whether its run was cancelled, the end
    of its time budget, and ``convert``: decoding a downloaded file into an artifact, in a
    sandbox process. For provider webhooks (nodes/adapters/hooks.py): the URL a provider
    calls for this node run (None: poll only), the job as stored now (with what a webhook
    delivered) and ``signals``, to wait until a webhook may have been kept."""

    def __init__(
        self,
        *,
        credential: Any,
        remembered_job: dict[str, Any] | None,
        remember: Callable[[dict[str, Any] | None], Awaitable[None]],
        cancelled: Callable[[], Awaitable[bool]],
        convert: Callable[[Path, str], Awaitable[Any]],
        deadline: float,
        hook_url: Callable[[str], str | None] = lambda provider: None,
        stored_job: Callable[[], Awaitable[dict[str, Any] | None]] | None = None,
        signals: Hooks = _no_signals,
        connections: ProviderConnections | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connections = connections  # the process's kept-alive provider connections
        self._hook_url = hook_url
        self._stored_job = stored_job
        self._signals = signals
        self.credential = credential
        self.remembered_job = remembered_job
        self.deadline = deadline  # on the event loop's clock
        self._remember = remember
        self._cancelled = cancelled
        self._convert = convert

    async def remember_job(self, job: dict[str, Any] | None) -> None:
        await self._remember(job)
        self.remembered_job = job

    async def run_cancelled(self) -> bool:
        return await self._cancelled()

    async def convert(self, path: Path, kind: str) -> Any:
        return await self._convert(path, kind)

    def hook_url(self, provider: str) -> str | None:
        return self._hook_url(provider)

    async def stored_job(self) -> dict[str, Any] | None:
        if self._stored_job is None:
            return self.remembered_job
        return await self._stored_job()

    def signals(self) -> contextlib.AbstractAsyncContextManager[Signals]:
        return self._signals()
