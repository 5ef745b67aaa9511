"""``ComfyUIWorkflow`` resuming with a prompt id stored by an earlier attempt, against the
real fake ComfyUI server: a finished prompt is read from the history, a failed one fails the
node (and is forgotten), one the server never got is queued under the stored id — and a
prompt that ran is never queued twice. Progress is reported in order."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeloom import budget
from nodeloom.engine.context import ProviderNodeContext
from nodeloom.nodes.adapters import comfyui, policy
from nodeloom.sandbox.pool import SandboxPool
from nodeloom.sdk._node import NodeFailure, Produced
from nodeloom.settings import Settings
from tests.comfyui_fake import SDXL_WORKFLOW, FakeComfyUI, running
from tests.nodes.conftest import make_settings

PARAMS = {"workflow": SDXL_WORKFLOW, "output": {"node": "9"}, "credential": "c1"}


@pytest.fixture
def fake() -> Iterator[FakeComfyUI]:
    with running(FakeComfyUI(steps=3, step_seconds=0.02)) as server:
        yield server


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data", http_allowlist=["127.0.0.1/32"])


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[SandboxPool]:
    sandbox = SandboxPool(settings)
    await sandbox.start()
    yield sandbox
    await sandbox.stop()


def context(
    settings: Settings, scratch: Path, pool: SandboxPool, fake: FakeComfyUI, job: Any
) -> ProviderNodeContext:
    async def convert(path: Path, kind: str) -> Produced:
        limits = budget.resolve("T", kind, "pro", overrides={}, plan_caps={}, timeout_seconds=30)
        return await pool.convert(path, kind, scratch, limits, "acct")

    async def remember(job: dict[str, Any] | None) -> None:
        ctx.jobs.append(job)  # type: ignore[attr-defined]

    async def cancelled() -> bool:
        return False

    async def progress(fraction: float) -> None:
        ctx.fractions.append(fraction)  # type: ignore[attr-defined]

    ctx = ProviderNodeContext(
        credential=policy.Credential("c1", "comfyui", {"base_url": fake.url}, {}),
        remembered_job=job,
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
    ctx.jobs = []  # type: ignore[attr-defined]
    ctx.fractions = []  # type: ignore[attr-defined]
    return ctx


def stored_job(prompt_id: str, params: dict[str, Any] = PARAMS) -> dict[str, Any]:
    model = comfyui.ComfyUIWorkflowParams.model_validate(params)
    fingerprint = policy.request_fingerprint(comfyui.request_of(model, {}))
    return {
        "id": prompt_id,
        "client_id": "nodeloom-x",
        "provider": "comfyui",
        "request": fingerprint,
    }


async def run(ctx: ProviderNodeContext, params: dict[str, Any] = PARAMS) -> Produced:
    node = comfyui.ComfyUIWorkflow()
    return await node.run(ctx, node.spec.params.model_validate(params), {})


def queue_directly(fake: FakeComfyUI, prompt: dict[str, Any], prompt_id: str) -> None:
    """What the earlier attempt did before the crash: the prompt queued on the server."""
    body = {"prompt": prompt, "client_id": "nodeloom-x", "prompt_id": prompt_id}
    assert httpx.post(fake.url + "/prompt", json=body).status_code == 200
    deadline = time.monotonic() + 10
    while prompt_id not in fake.history:
        assert time.monotonic() < deadline
        time.sleep(0.02)


class TestResume:
    async def test_a_finished_prompt_is_read_from_the_history(
        self, settings: Settings, tmp_path: Path, pool: SandboxPool, fake: FakeComfyUI
    ) -> None:
        await asyncio.to_thread(queue_directly, fake, SDXL_WORKFLOW, "p-earlier")
        ctx = context(settings, tmp_path / "s", pool, fake, stored_job("p-earlier"))
        produced = await run(ctx)
        assert (produced.width, produced.height) == (96, 64)
        assert len(fake.submissions) == 1  # the earlier attempt's only
        assert ctx.jobs == []  # type: ignore[attr-defined]

    async def test_a_failed_prompt_fails_the_node_and_is_forgotten(
        self, settings: Settings, tmp_path: Path, pool: SandboxPool, fake: FakeComfyUI
    ) -> None:
        workflow = copy.deepcopy(SDXL_WORKFLOW)
        workflow["8"] = {"class_type": "Explode", "inputs": {}}
        params = {**PARAMS, "workflow": workflow}
        await asyncio.to_thread(queue_directly, fake, workflow, "p-failed")
        ctx = context(settings, tmp_path / "s", pool, fake, stored_job("p-failed", params))
        with pytest.raises(NodeFailure, match=r"node 8 \(Explode\).*CUDA out of memory"):
            await run(ctx, params)
        assert ctx.jobs == [None]  # type: ignore[attr-defined]
        assert len(fake.submissions) == 1

    async def test_a_prompt_the_server_never_got_is_queued_under_its_id(
        self, settings: Settings, tmp_path: Path, pool: SandboxPool, fake: FakeComfyUI
    ) -> None:
        ctx = context(settings, tmp_path / "s", pool, fake, stored_job("p-lost"))
        await run(ctx)
        (submitted,) = fake.submissions
        assert submitted["prompt_id"] == "p-lost"
        fractions: list[float] = ctx.fractions  # type: ignore[attr-defined]
        assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(0.99)

    async def test_another_request_is_not_attached_to(
        self, settings: Settings, tmp_path: Path, pool: SandboxPool, fake: FakeComfyUI
    ) -> None:
        await asyncio.to_thread(queue_directly, fake, SDXL_WORKFLOW, "p-old")
        changed = copy.deepcopy(SDXL_WORKFLOW)
        changed["6"]["inputs"]["text"] = "another prompt"
        ctx = context(settings, tmp_path / "s", pool, fake, stored_job("p-old"))
        await run(ctx, {**PARAMS, "workflow": changed})
        assert len(fake.submissions) == 2
        assert fake.submissions[1]["prompt_id"] != "p-old"
