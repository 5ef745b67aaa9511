"""Provider nodes through the executor: they wait for the provider on the server's event loop
and hold no sandbox process while they wait, and the output cache follows the model that the
settings resolve to. Against the fake OpenAI-compatible server of the node tests."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from nodeloom.api.app import create_app
from nodeloom.settings import Settings
from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.nodes.conftest import FakeServer
from tests.nodes.conftest import provider as provider  # the fixture
from tests.runs_helpers import create_workflow, e, g, n, wait_for_run


class TestProviderRuns:
    @pytest.fixture
    def settings_overrides(self, provider: FakeServer) -> dict[str, object]:
        return {
            "provider_base_url": provider.url + "/v1",
            "provider_api_key": "sk-test-key",
            "rate_limit_api_key": 10_000,
        }

    async def test_nodes_reach_the_provider_with_its_key(
        self, client: httpx.AsyncClient, owner: User, provider: FakeServer
    ) -> None:
        graph = g(
            [
                n("in", "TextInput", text="hello"),
                n("llm", "LLMText"),
                n("tts", "TextToSpeech", engine="auto"),
            ],
            [e("in", "llm"), e("llm", "tts")],
        )
        wf = await create_workflow(client, owner, graph)
        r = await client.post(f"/api/v1/workflows/{wf}/execute", headers=owner.headers)
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["status"] == "completed", run
        assert [q.path for q in provider.requests] == ["/v1/chat/completions", "/v1/audio/speech"]
        assert all(q.headers["Authorization"] == "Bearer sk-test-key" for q in provider.requests)

    async def test_cache_follows_the_configured_model(
        self, settings: Settings, client: httpx.AsyncClient, owner: User, provider: FakeServer
    ) -> None:
        graph = g([n("in", "TextInput", text="hi"), n("llm", "LLMText")], [e("in", "llm")])
        wf = await create_workflow(client, owner, graph)

        async def run_once(http: httpx.AsyncClient) -> dict[str, Any]:
            r = await http.post(f"/api/v1/workflows/{wf}/execute", headers=owner.headers)
            return await wait_for_run(http, owner, wf, r.json()["run_id"])

        def llm(run: dict[str, Any]) -> dict[str, Any]:
            return next(x for x in run["node_runs"] if x["node_id"] == "llm")

        await run_once(client)
        assert llm(await run_once(client))["cached"]
        assert len(provider.requests) == 1
        # The operator configures another model and restarts: "model": "" now means it.
        changed = settings.model_copy(update={"provider_llm_model": "a-newer-model"})
        app = create_app(changed)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
                third = await run_once(http)
        assert not llm(third)["cached"]
        assert len(provider.requests) == 2
        assert json.loads(provider.requests[-1].body)["model"] == "a-newer-model"


class TestWaitingHoldsNoSandbox:
    """A provider call in flight holds no sandbox process: with ONE sandbox process on the
    server, runs whose provider calls are held open by the provider still let another run's
    sandboxed node start and complete at once."""

    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def settings_overrides(self, provider: FakeServer) -> dict[str, object]:
        return {
            "provider_base_url": provider.url + "/v1",
            "provider_api_key": "sk-test-key",
            "rate_limit_api_key": 10_000,
            "sandbox_processes": 1,
            "sandbox_slots_per_account": 1,
        }

    async def test_sandboxed_node_completes_while_provider_calls_wait(
        self, client: httpx.AsyncClient, owner: User, provider: FakeServer
    ) -> None:
        gate = provider.gate = threading.Event()  # the provider answers nothing until set
        waiting = [
            n("in", "TextInput", text="a slow answer"),
            n("llm", "LLMText"),
            n("img", "TextToImage", size="64x48"),
            n("tts", "TextToSpeech", engine="provider"),
        ]
        slow = await create_workflow(
            client, owner, g(waiting, [e("in", "llm"), e("in", "img"), e("in", "tts")])
        )
        quick = await create_workflow(
            client,
            owner,
            g([n("in", "TextInput", text="one two three"), n("wc", "WordCount")], [e("in", "wc")]),
        )
        try:
            r = await client.post(f"/api/v1/workflows/{slow}/execute", headers=owner.headers)
            slow_run = r.json()["run_id"]
            deadline = time.monotonic() + 30
            while len(provider.requests) < 3:  # all three calls are in flight, held
                assert time.monotonic() < deadline, provider.requests
                await asyncio.sleep(0.05)
            started = time.monotonic()
            r = await client.post(f"/api/v1/workflows/{quick}/execute", headers=owner.headers)
            done = await wait_for_run(client, owner, quick, r.json()["run_id"], timeout=20)
            assert done["status"] == "completed", done
            assert time.monotonic() - started < 15
            assert not gate.is_set()  # the provider calls were still waiting meanwhile
            wc = next(x for x in done["node_runs"] if x["node_id"] == "wc")
            r = await client.get(f"/api/v1/artifacts/{wc['artifact_id']}", headers=owner.headers)
            assert r.status_code == 200 and r.text == "3", r.text
        finally:
            gate.set()
        run = await wait_for_run(client, owner, slow, slow_run)
        assert run["status"] == "completed", run
        assert {x["node_id"]: x["status"] for x in run["node_runs"]} == {
            "in": "completed",
            "llm": "completed",
            "img": "completed",
            "tts": "completed",
        }


class TestWithoutProvider:
    """No provider configured (the default): a workflow with a provider node is saved with a
    warning on the node, and refused at execute, by API call and by webhook alike."""

    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_saved_with_a_warning_and_refused_at_execute(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g([n("in", "TextInput", text="hi"), n("llm", "LLMText")], [e("in", "llm")])
        r = await client.post(
            "/api/v1/workflows", json={"name": "draft", "graph_json": graph}, headers=owner.headers
        )
        assert r.status_code == 201, r.text
        (warning,) = r.json()["warnings"]
        assert warning["pointer"] == "/graph_json/nodes/1/type"
        assert warning["message"].startswith("LLMText is unavailable: no AI provider")
        wf = r.json()["id"]
        got = await client.get(f"/api/v1/workflows/{wf}", headers=owner.headers)
        assert got.json()["warnings"] == [warning]

        r = await client.post(f"/api/v1/workflows/{wf}/execute", headers=owner.headers)
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"] == [warning]
        hook = await client.post(
            f"/api/v1/workflows/{wf}/webhooks",
            json={"name": "h", "active": True},
            headers=owner.headers,
        )
        r = await client.post(f"/api/v1/webhooks/{hook.json()['token']}", json={"text": "x"})
        assert_problem(r, 400, "invalid_graph")
        runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        assert runs.json() == []

        # Without the provider node it saves clean and runs.
        r = await client.patch(
            f"/api/v1/workflows/{wf}",
            json={"graph_json": g([n("in", "TextInput", text="hi")], [])},
            headers=owner.headers,
        )
        assert r.status_code == 200 and r.json()["warnings"] == []
        r = await client.post(f"/api/v1/workflows/{wf}/execute", headers=owner.headers)
        assert r.status_code == 202, r.text
