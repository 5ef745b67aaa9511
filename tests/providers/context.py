"""A provider node's context for tests that run a node directly (the node catalog walk):
what the executor builds (engine/context.py ``ProviderNodeContext``), with the credential
given as it would be decrypted, jobs remembered in memory, and conversion run in this
process (the executor sends it to a sandbox process)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nodeloom.engine.context import ProviderNodeContext
from nodeloom.nodes.adapters.media import to_artifact
from nodeloom.nodes.adapters.policy import Credential
from nodeloom.sdk._node import Produced
from nodeloom.settings import Settings


def provider_context(
    settings: Settings,
    scratch: Path,
    credential: Credential | None = None,
    *,
    remembered: dict[str, Any] | None = None,
    cancelled: bool = False,
    account: str = "account",
) -> ProviderNodeContext:
    jobs: list[dict[str, Any] | None] = []
    progress: list[float] = []

    async def remember(job: dict[str, Any] | None) -> None:
        jobs.append(job)

    async def run_cancelled() -> bool:
        return cancelled

    async def convert(path: Path, kind: str) -> Produced:
        return await asyncio.to_thread(to_artifact, kind, path, scratch, settings)

    async def report(fraction: float) -> None:
        progress.append(fraction)

    ctx = ProviderNodeContext(
        credential=credential,
        remembered_job=remembered,
        remember=remember,
        cancelled=run_cancelled,
        convert=convert,
        deadline=asyncio.get_running_loop().time() + 120,
        run_id="run",
        node_id="node",
        account_id=account,
        run_input=None,
        settings=settings,
        report=report,
        scratch=scratch,
    )
    ctx.jobs = jobs  # type: ignore[attr-defined]
    ctx.reported = progress  # type: ignore[attr-defined]
    return ctx
