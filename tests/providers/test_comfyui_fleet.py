"""``ComfyUIWorkflow`` on a fleet of real fake ComfyUI servers on 127.0.0.1: a prompt goes
only to a server with its node types and model files, and to the least loaded; a prompt no
server can run fails at once naming what each lacks; a server killed mid-prompt is left and
the prompt submitted again on another (recorded on the node run's job); a draining server
finishes its prompt and gets no new one; on the shared pool, a free slot goes to the account
with the fewest in flight."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeloom.engine.context import ProviderNodeContext
from nodeloom.nodes.adapters import comfyui, comfyui_fleet, policy
from nodeloom.sdk._node import NodeFailure, Produced
from nodeloom.settings import Settings
from tests.comfyui_fake import KNOWN, MODELS, SDXL_WORKFLOW, FakeComfyUI, running
from tests.nodes.conftest import make_settings
from tests.providers.context import provider_context

PARAMS = {"workflow": SDXL_WORKFLOW, "output": {"node": "9"}, "credential": "c1"}


@contextlib.contextmanager
def fakes(*servers: FakeComfyUI) -> Iterator[list[FakeComfyUI]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running(s)) for s in servers]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(
        tmp_path / "data",
        http_allowlist=["127.0.0.1/32"],
        provider_max_retries=1,
        comfyui_check_seconds=0.2,
    )


@pytest.fixture(autouse=True)
async def closed() -> AsyncIterator[None]:
    yield
    await comfyui_fleet.close_all()


def context(
    settings: Settings,
    scratch: Path,
    fields: dict[str, Any],
    account: str = "acct",
    credential: str = "c1",
) -> ProviderNodeContext:
    scratch.mkdir(parents=True, exist_ok=True)
    given = policy.Credential(credential, "comfyui", fields, {})
    return provider_context(settings, scratch, given, account=account)


def fleet_of(*servers: FakeComfyUI, **extra: Any) -> dict[str, Any]:
    return {
        "servers": [{"base_url": s.url, "name": f"gpu{i}", **extra} for i, s in enumerate(servers)]
    }


def saying(text: str) -> dict[str, Any]:
    workflow = copy.deepcopy(SDXL_WORKFLOW)
    workflow["6"]["inputs"]["text"] = text
    return {**PARAMS, "workflow": workflow}


async def run(ctx: ProviderNodeContext, params: dict[str, Any] = PARAMS) -> Produced:
    node = comfyui.ComfyUIWorkflow()
    return await node.run(ctx, node.spec.params.model_validate(params), {})


def texts(fake: FakeComfyUI) -> list[str]:
    return [s["prompt"]["6"]["inputs"]["text"] for s in fake.submissions]


async def until(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


class TestRouting:
    async def test_a_prompt_goes_only_where_its_nodes_and_models_are(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        no_sampler = FakeComfyUI(steps=1, step_seconds=0.01, classes=KNOWN - {"KSampler"})
        no_model = FakeComfyUI(
            steps=1,
            step_seconds=0.01,
            models={**MODELS, "checkpoints": ("other.safetensors",)},
        )
        both = FakeComfyUI(steps=1, step_seconds=0.01)
        with fakes(no_sampler, no_model, both):
            fields = fleet_of(no_sampler, no_model, both)
            ctxs = [context(settings, tmp_path / f"s{i}", fields) for i in range(3)]
            done = await asyncio.gather(*(run(c) for c in ctxs))
        assert [(p.width, p.height) for p in done] == [(96, 64)] * 3
        assert (len(no_sampler.submissions), len(no_model.submissions)) == (0, 0)
        assert len(both.submissions) == 3
        job = ctxs[0].jobs[-1]  # type: ignore[attr-defined]
        assert (job["server"], job["server_name"]) == (both.url, "gpu2")

    async def test_a_prompt_no_server_can_run_fails_at_once_naming_what_lacks(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        no_sampler = FakeComfyUI(classes=KNOWN - {"KSampler"})
        no_model = FakeComfyUI(models={**MODELS, "checkpoints": ("other.safetensors",)})
        with fakes(no_sampler, no_model):
            ctx = context(settings, tmp_path / "s", fleet_of(no_sampler, no_model))
            started = time.monotonic()
            with pytest.raises(NodeFailure) as failed:
                await run(ctx)
        assert time.monotonic() - started < 5
        message = failed.value.message
        assert "gpu0: lacks node types KSampler" in message
        assert "gpu1: lacks model files sdxl.safetensors (CheckpointLoaderSimple ckpt_name)" in (
            message
        )
        assert no_sampler.submissions == no_model.submissions == []

    async def test_a_model_added_later_is_found_on_the_miss(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        server = FakeComfyUI(steps=1, step_seconds=0.01, models={"checkpoints": ()})
        with fakes(server):
            fields = fleet_of(server)
            with pytest.raises(NodeFailure, match=r"lacks model files sdxl\.safetensors"):
                await run(context(settings, tmp_path / "a", fields))
            server.models = dict(MODELS)  # the file copied onto the server
            await asyncio.sleep(comfyui_fleet.MISS_REFRESH)
            produced = await run(context(settings, tmp_path / "b", fields))
        assert produced.width == 96

    async def test_prompts_spread_over_the_least_loaded_servers(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        servers = [FakeComfyUI(steps=2, step_seconds=0.2) for _ in range(4)]
        with fakes(*servers):
            fields = fleet_of(*servers)
            ctxs = [context(settings, tmp_path / f"s{i}", fields) for i in range(4)]
            await asyncio.gather(*(run(c) for c in ctxs))
        assert [len(s.submissions) for s in servers] == [1, 1, 1, 1]

    async def test_the_refusal_of_a_server_quotes_its_node_errors(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        server = FakeComfyUI()
        workflow = copy.deepcopy(SDXL_WORKFLOW)
        del workflow["5"]["inputs"]["width"]
        with fakes(server):
            ctx = context(settings, tmp_path / "s", fleet_of(server))
            with pytest.raises(NodeFailure, match="Required input is missing: width"):
                await run(ctx, {**PARAMS, "workflow": workflow})


class TestHealth:
    async def test_a_server_killed_mid_prompt_is_left_for_another(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        servers = [FakeComfyUI(steps=20, step_seconds=0.05) for _ in range(2)]
        with fakes(*servers):
            ctx = context(settings, tmp_path / "s", fleet_of(*servers))
            task = asyncio.ensure_future(run(ctx))
            await until(lambda: any(s.running for s in servers))
            killed, other = servers if servers[0].running else servers[::-1]
            killed.kill()
            produced = await task
        assert produced.width == 96
        assert len(killed.submissions) == len(other.submissions) == 1
        job = ctx.jobs[-1]  # type: ignore[attr-defined]
        assert job["server"] == other.url
        (left,) = job["resubmitted"]
        assert left["server"] == ("gpu0" if killed is servers[0] else "gpu1")
        assert left["prompt_id"] == killed.submissions[0]["prompt_id"]
        metrics = comfyui_fleet.render_metrics()
        name = left["server"]
        assert f'nodeloom_comfyui_server_up{{fleet="credential:c1",server="{name}"}} 0' in metrics

    async def test_a_draining_server_finishes_its_prompt_and_gets_no_new_one(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        servers = [FakeComfyUI(steps=10, step_seconds=0.05) for _ in range(2)]
        with fakes(*servers):
            first = asyncio.ensure_future(
                run(context(settings, tmp_path / "a", fleet_of(*servers)))
            )
            await until(lambda: any(s.running for s in servers))
            busy, idle = servers if servers[0].running else servers[::-1]
            fields = fleet_of(*servers)
            for entry in fields["servers"]:
                entry["draining"] = entry["base_url"] == busy.url
            later = [context(settings, tmp_path / f"b{i}", fields) for i in range(3)]
            await asyncio.gather(first, *(run(c) for c in later))
        assert len(busy.submissions) == 1 and len(busy.history) == 1
        assert len(idle.submissions) == 3

    async def test_a_server_drained_by_the_button_finishes_its_prompt_and_gets_no_new_one(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        """Drained while it runs a prompt (``set_drained``: what every process's drain feed
        hands its fleets): that prompt finishes there, the next ones go elsewhere; undrained,
        it takes prompts again."""
        servers = [FakeComfyUI(steps=10, step_seconds=0.05) for _ in range(2)]
        with fakes(*servers):
            fields = fleet_of(*servers)
            first = asyncio.ensure_future(run(context(settings, tmp_path / "a", fields)))
            await until(lambda: any(s.running for s in servers))
            busy, idle = servers if servers[0].running else servers[::-1]
            comfyui_fleet.set_drained({("credential:c1", busy.url)})
            later = [context(settings, tmp_path / f"b{i}", fields) for i in range(3)]
            await asyncio.gather(*(run(c) for c in later))
            await first
            assert len(busy.submissions) == 1 and len(busy.history) == 1
            assert len(idle.submissions) == 3
            (row,) = [r for r in comfyui_fleet.snapshot() if r["url"] == busy.url]
            assert row["draining"] is True

            comfyui_fleet.set_drained({("credential:c1", idle.url)})  # busy undrained
            await run(context(settings, tmp_path / "c", fields))
        assert (len(busy.submissions), len(idle.submissions)) == (2, 3)


class TestSharedPool:
    async def test_a_free_slot_goes_to_the_least_served_account(self, tmp_path: Path) -> None:
        server = FakeComfyUI(steps=2, step_seconds=0.1)
        with fakes(server):
            settings = make_settings(
                tmp_path / "data",
                http_allowlist=["127.0.0.1/32"],
                comfyui_pool=[{"base_url": server.url, "name": "shared"}],
                comfyui_pool_account_limit=2,
            )
            fields = {"shared_pool": True}
            a = [
                asyncio.ensure_future(
                    run(
                        context(settings, tmp_path / f"a{i}", fields, "A", "ca"),
                        saying(f"a{i}"),
                    )
                )
                for i in range(4)
            ]
            await until(lambda: server.running is not None)
            b = asyncio.ensure_future(
                run(context(settings, tmp_path / "b", fields, "B", "cb"), saying("b0"))
            )
            await asyncio.gather(*a, b)
        # A's first prompt held the only slot; B, served least, went next.
        assert texts(server)[:2] == ["a0", "b0"]
        assert sorted(texts(server)) == ["a0", "a1", "a2", "a3", "b0"]

    async def test_an_account_keeps_to_its_limit_on_the_pool(self, tmp_path: Path) -> None:
        servers = [FakeComfyUI(steps=2, step_seconds=0.1) for _ in range(3)]
        with fakes(*servers):
            settings = make_settings(
                tmp_path / "data",
                http_allowlist=["127.0.0.1/32"],
                comfyui_pool=[{"base_url": s.url} for s in servers],
                comfyui_pool_account_limit=1,
            )
            most = 0

            async def watch() -> None:
                nonlocal most
                while True:
                    most = max(most, sum(s.running is not None for s in servers))
                    await asyncio.sleep(0.005)

            watcher = asyncio.ensure_future(watch())
            ctxs = [
                context(settings, tmp_path / f"a{i}", {"shared_pool": True}, "A") for i in range(3)
            ]
            await asyncio.gather(*(run(c) for c in ctxs))
            watcher.cancel()
        assert most == 1


class TestOneWebSocket:
    async def test_prompts_queued_together_on_a_server_share_its_websocket(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        server = FakeComfyUI(steps=3, step_seconds=0.05)
        with fakes(server):
            fields = fleet_of(server, max_in_flight=3)
            ctxs = [context(settings, tmp_path / f"s{i}", fields) for i in range(3)]
            done = await asyncio.gather(*(run(c, saying(f"t{i}")) for i, c in enumerate(ctxs)))
        assert [p.width for p in done] == [96] * 3
        assert len({s["client_id"] for s in server.submissions}) == 1
        # Each prompt heard its own progress (routed by prompt_id), not the others'.
        for ctx in ctxs:
            reported = ctx.reported  # type: ignore[attr-defined]
            assert reported and reported == sorted(reported)


class TestMany:
    async def test_forty_prompts_over_four_servers_one_killed_all_complete(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        """The issue's measure, untimed (the bench times it): 40 prompts over 4 one-slot
        servers sharing one WebSocket each; one server killed once its prompts have begun."""
        servers = [FakeComfyUI(steps=2, step_seconds=0.05) for _ in range(4)]
        with fakes(*servers):
            fields = fleet_of(*servers)
            ctxs = [context(settings, tmp_path / f"s{i}", fields) for i in range(40)]
            tasks = [asyncio.ensure_future(run(c, saying(f"p{i}"))) for i, c in enumerate(ctxs)]
            await until(lambda: len(servers[0].history) >= 2)
            servers[0].kill()
            done = await asyncio.gather(*tasks)
        assert [p.width for p in done] == [96] * 40
        finished = {
            e["prompt"][2]["6"]["inputs"]["text"] for s in servers for e in s.history.values()
        }
        assert finished == {f"p{i}" for i in range(40)}
        fleet = comfyui_fleet.fleets()
        assert fleet == [] or all(s.in_flight == 0 for f in fleet for s in f.listed())
        # Each surviving server's prompts were followed on one WebSocket.
        for server in servers[1:]:
            assert len({s["client_id"] for s in server.submissions}) == 1
