"""What the executor hands a running node (implements nodes.base.NodeContext)."""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
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
        executor: Executor,
        report: Callable[[float], Awaitable[None]],
        scratch_root: Path,
    ) -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.account_id = account_id
        self.input = run_input
        self.settings = settings
        self._executor = executor
        self._report = report
        self._scratch_root = scratch_root
        self._scratch: Path | None = None

    @property
    def scratch_dir(self) -> Path:
        """Created on first use: most nodes never touch the disk."""
        if self._scratch is None:
            self._scratch_root.mkdir(parents=True, exist_ok=True)
            self._scratch = Path(tempfile.mkdtemp(prefix="node-", dir=self._scratch_root))
        return self._scratch

    async def progress(self, fraction: float) -> None:
        await self._report(min(1.0, max(0.0, float(fraction))))

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    def cleanup(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
