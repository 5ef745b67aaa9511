"""What the executor hands a node that runs on the event loop (implements
nodes.base.NodeContext). Only nodes whose ``runs_inline`` says so run this way (they compute
nothing, or a bounded pass over their inputs); the rest run in a sandbox process with its own
context (sandbox/worker.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

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
    ) -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.account_id = account_id
        self.input = run_input
        self.settings = settings
        self.inline = True
        # An account's credential the node names (a provider wait on the loop), else None.
        self.credential: dict[str, str] | None = None
        self._report = report
        self._scratch = scratch

    @property
    def scratch_dir(self) -> Path:
        """Created on first use: most nodes never touch the disk."""
        self._scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self._scratch

    async def progress(self, fraction: float) -> None:
        await self._report(min(1.0, max(0.0, float(fraction))))

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)
