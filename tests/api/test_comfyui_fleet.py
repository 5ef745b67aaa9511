"""A comfyui credential naming a fleet, through our API, with real fake ComfyUI servers on
127.0.0.1: the fields as sent (URLs in a line, or objects) and as shown, every malformed
form refused with a pointer (on SQLite and PostgreSQL), a run routed to the server that has
the workflow's model, its connection test naming each server, and /metrics per server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.nodes.adapters import comfyui_fleet, policy
from nodeloom.nodes.adapters.comfyui_drains import DrainFeed
from nodeloom.settings import ComfyUIServer
from nodeloom.store import comfyui_drains
from tests.api.test_auth import assert_problem
from tests.api.test_comfyui import comfy_node, comfy_run, run_workflow, text_graph
from tests.comfyui_fake import MODELS, FakeComfyUI, running
from tests.conftest import User


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"http_allowlist": ["127.0.0.1"], "rate_limit_api_key": 10_000}


@pytest.fixture
def pair() -> Iterator[tuple[FakeComfyUI, FakeComfyUI]]:
    lacking = FakeComfyUI(models={**MODELS, "checkpoints": ()})
    with running(lacking), running(FakeComfyUI()) as having:
        yield lacking, having


async def create(client: httpx.AsyncClient, user: User, fields: object) -> httpx.Response:
    return await client.post(
        "/api/v1/credentials",
        json={"name": "fleet", "kind": "comfyui", "fields": fields},
        headers=user.headers,
    )


class TestFields:
    async def test_servers_as_a_line_of_urls_or_as_objects(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await create(client, owner, {"servers": "http://10.0.0.1:8188, http://10.0.0.2:8188/"})
        assert r.status_code == 201, r.text
        assert r.json()["fields"] == {
            "servers": [
                {"base_url": u, "max_in_flight": 1, "draining": False}
                for u in ("http://10.0.0.1:8188", "http://10.0.0.2:8188")
            ]
        }
        r = await create(
            client,
            owner,
            {"servers": [{"base_url": "http://gpu:8188", "name": "big", "max_in_flight": 2}]},
        )
        assert r.status_code == 201, r.text
        (server,) = r.json()["fields"]["servers"]
        assert (server["name"], server["max_in_flight"]) == ("big", 2)
        r = await create(client, owner, {"shared_pool": True})
        assert r.status_code == 201, r.text
        assert r.json()["fields"] == {"shared_pool": True}

    async def test_the_form_offers_one_server_a_fleet_or_the_pool(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.get("/api/v1/credential-kinds", headers=owner.headers)
        (kind,) = [k for k in r.json() if k["kind"] == "comfyui"]
        fields = {f["name"]: f for f in kind["fields"]}
        assert list(fields)[:3] == ["base_url", "servers", "shared_pool"]
        assert not any(fields[n]["required"] for n in ("base_url", "servers", "shared_pool"))
        assert fields["servers"]["placeholder"] == "http://gpu1:8188, http://gpu2:8188"

    @pytest.mark.parametrize(
        ("fields", "pointer"),
        [
            ({}, "/fields"),
            ({"base_url": "http://a:1", "servers": "http://b:1"}, "/fields"),
            ({"servers": "http://a:1 http://a:1"}, "/fields"),
            ({"servers": []}, "/fields/servers"),
            ({"servers": "ftp://a"}, "/fields/servers/0/base_url"),
            (
                {"servers": [{"base_url": "http://a:1", "max_in_flight": 0}]},
                "/fields/servers/0/max_in_flight",
            ),
            (
                {"servers": [{"base_url": "http://a:1", "bearer_token": "t" * 20}]},
                "/fields/servers",
            ),
            ({"servers": 7}, "/fields/servers"),
        ],
    )
    async def test_a_malformed_fleet_is_refused_with_a_pointer(
        self, client: httpx.AsyncClient, owner: User, fields: object, pointer: str
    ) -> None:
        body = assert_problem(await create(client, owner, fields), 400, "invalid_request")
        pointers = [e["pointer"] for e in body["errors"]]  # type: ignore[attr-defined]
        assert pointer in pointers, body


class TestRuns:
    async def test_a_run_goes_to_the_server_with_its_model_and_metrics_show_both(
        self, client: httpx.AsyncClient, owner: User, pair: tuple[FakeComfyUI, FakeComfyUI]
    ) -> None:
        lacking, having = pair
        servers = [{"base_url": lacking.url, "name": "small"}, {"base_url": having.url}]
        r = await create(client, owner, {"servers": servers})
        credential = r.json()["id"]
        run = await run_workflow(client, owner, text_graph(comfy_node(credential)))
        assert run["status"] == "completed", run
        assert comfy_run(run)["credits_used"] == 10
        assert (len(lacking.submissions), len(having.submissions)) == (0, 1)
        port = having.url.rsplit(":", 1)[1]
        assert comfy_run(run)["server"] == f"127.0.0.1:{port}"  # the node run names it
        metrics = (await client.get("/metrics")).text
        fleet = f'fleet="credential:{credential}"'
        assert f'nodeloom_comfyui_server_up{{{fleet},server="small"}} 1' in metrics
        assert f'nodeloom_comfyui_server_in_flight{{{fleet},server="127.0.0.1:{port}"}} 0' in (
            metrics
        )

        r = await client.post(f"/api/v1/credentials/{credential}/test", headers=owner.headers)
        result = r.json()
        assert result["ok"] is True
        assert result["message"].startswith("small: ComfyUI answered")
        assert f"{having.url}: ComfyUI answered" in result["message"]

    async def test_a_workflow_no_server_can_run_fails_naming_what_lacks(
        self, client: httpx.AsyncClient, owner: User, pair: tuple[FakeComfyUI, FakeComfyUI]
    ) -> None:
        lacking, _ = pair
        r = await create(client, owner, {"servers": [{"base_url": lacking.url, "name": "s"}]})
        run = await run_workflow(client, owner, text_graph(comfy_node(r.json()["id"])))
        assert run["status"] == "failed", run
        error = comfy_run(run)["error"]
        assert (
            "s: lacks model files sdxl.safetensors (CheckpointLoaderSimple ckpt_name)"
            in (error["message"])
        )
        assert lacking.submissions == []


class TestOperator:
    async def test_the_owner_sees_the_pool_before_and_after_a_prompt(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        with running(FakeComfyUI()) as fake:
            settings = app.state.ctx.settings
            settings.comfyui_pool = [ComfyUIServer(base_url=fake.url, name="shared")]
            me = await client.get("/api/v1/me", headers=owner.headers)
            assert me.json()["operator"] is True
            r = await client.get("/api/v1/operator/comfyui-pool", headers=owner.headers)
            assert r.status_code == 200, r.text
            (server,) = r.json()["servers"]
            assert server["name"] == "shared" and server["answering"] is None
            assert (server["in_flight"], server["processes"], server["last_seen"]) == (0, 0, None)

            made = await create(client, owner, {"shared_pool": True})
            run = await run_workflow(client, owner, text_graph(comfy_node(made.json()["id"])))
            assert run["status"] == "completed", run
            assert comfy_run(run)["server"] == "shared"
            r = await client.get("/api/v1/operator/comfyui-pool", headers=owner.headers)
        (server,) = r.json()["servers"]
        assert server["answering"] is True and server["processes"] == 1
        assert (server["in_flight"], server["failures"], server["draining"]) == (0, 0, False)
        assert server["last_seen"] is not None
        assert r.json()["account_limit"] == settings.comfyui_pool_account_limit

    async def test_other_accounts_are_refused(
        self, client: httpx.AsyncClient, app: FastAPI, other: User
    ) -> None:
        me = await client.get("/api/v1/me", headers=other.headers)
        assert me.json()["operator"] is False
        r = await client.get("/api/v1/operator/comfyui-pool", headers=other.headers)
        assert_problem(r, 403, "forbidden")
        assert_problem(await client.get("/api/v1/operator/comfyui-pool"), 401, "unauthorized")

    async def test_operator_emails_name_the_operators(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User, other: User
    ) -> None:
        app.state.ctx.settings.operator_emails = ["OTHER@example.com"]
        r = await client.get("/api/v1/operator/comfyui-pool", headers=other.headers)
        assert r.status_code == 200 and r.json()["servers"] == []
        r = await client.get("/api/v1/operator/comfyui-pool", headers=owner.headers)
        assert_problem(r, 403, "forbidden")


def servers_url(credential: str) -> str:
    return f"/api/v1/credentials/{credential}/servers"


class TestDrain:
    """The Drain button's endpoints: the operator's over every server, an account's over its
    own credential's; the drain a row every process reads (comfyui_drains)."""

    async def test_the_operator_sees_every_server_an_account_its_own(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User, other: User
    ) -> None:
        app.state.ctx.settings.comfyui_pool = [
            ComfyUIServer(base_url="http://10.0.0.9:8188/", name="shared")
        ]
        fleet = {"servers": [{"base_url": "http://10.0.0.1:8188/secret-path", "name": "gpu"}]}
        credential = (await create(client, other, fleet)).json()["id"]
        r = await client.get("/api/v1/operator/comfyui-servers", headers=owner.headers)
        assert r.status_code == 200, r.text
        pool, theirs = r.json()["servers"]
        assert (pool["fleet"], pool["base_url"], pool["account_email"]) == (
            "pool",
            "http://10.0.0.9:8188",
            None,
        )
        assert (theirs["fleet"], theirs["host"], theirs["account_email"]) == (
            "account",
            "10.0.0.1:8188",
            other.email,
        )
        assert theirs["base_url"] is None and credential not in r.text and other.id not in r.text
        assert (theirs["draining"], theirs["in_flight"], theirs["answering"]) == (False, 0, None)

        r = await client.get(servers_url(credential), headers=other.headers)
        (own,) = r.json()
        assert own["base_url"] == "http://10.0.0.1:8188/secret-path" and own["id"] == theirs["id"]
        r = await client.get(servers_url(credential), headers=owner.headers)
        assert_problem(r, 404, "not_found")

    async def test_only_operators_drain_from_the_operator_page(
        self, client: httpx.AsyncClient, app: FastAPI, other: User
    ) -> None:
        app.state.ctx.settings.comfyui_pool = [ComfyUIServer(base_url="http://10.0.0.9:8188")]
        for verb in ("drain", "undrain"):
            url = f"/api/v1/operator/comfyui-servers/x/{verb}"
            assert_problem(await client.post(url, headers=other.headers), 403, "forbidden")
        r = await client.get("/api/v1/operator/comfyui-servers", headers=other.headers)
        assert_problem(r, 403, "forbidden")

    async def test_a_server_is_drained_or_undrained_nothing_else(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        credential = (await create(client, owner, {"servers": "http://10.0.0.1:8188"})).json()
        (server,) = (await client.get(servers_url(credential["id"]), headers=owner.headers)).json()
        url = f"{servers_url(credential['id'])}/{server['id']}/reboot"
        assert_problem(await client.post(url, headers=owner.headers), 400, "invalid_request")
        url = f"/api/v1/operator/comfyui-servers/{server['id']}/reboot"
        assert_problem(await client.post(url, headers=owner.headers), 400, "invalid_request")

    async def test_an_account_cannot_drain_another_accounts_server(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        fleet = {"servers": "http://10.0.0.1:8188 http://10.0.0.2:8188"}
        credential = (await create(client, owner, fleet)).json()["id"]
        first, _ = (await client.get(servers_url(credential), headers=owner.headers)).json()
        drain = f"{servers_url(credential)}/{first['id']}/drain"
        assert_problem(await client.post(drain, headers=other.headers), 404, "not_found")
        mine = (await create(client, other, fleet)).json()["id"]
        # Its own credential with the other's server id: not one of its servers.
        bad = f"{servers_url(mine)}/{first['id']}/drain"
        assert_problem(await client.post(bad, headers=other.headers), 404, "not_found")
        listed = (await client.get(servers_url(credential), headers=owner.headers)).json()
        assert [s["draining"] for s in listed] == [False, False]

        r = await client.post(drain, headers=owner.headers)
        assert r.status_code == 200, r.text
        assert r.json()["draining"] is True and r.json()["drain_configured"] is False
        listed = (await client.get(servers_url(credential), headers=owner.headers)).json()
        assert [s["draining"] for s in listed] == [True, False]
        r = await client.post(drain.replace("/drain", "/undrain"), headers=owner.headers)
        assert r.json()["draining"] is False

    async def test_a_server_drained_by_configuration_is_not_undrained_by_the_button(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        app.state.ctx.settings.comfyui_pool = [
            ComfyUIServer(base_url="http://10.0.0.9:8188", draining=True)
        ]
        (server,) = (
            await client.get("/api/v1/operator/comfyui-servers", headers=owner.headers)
        ).json()["servers"]
        assert server["draining"] is True and server["drain_configured"] is True
        r = await client.post(
            f"/api/v1/operator/comfyui-servers/{server['id']}/undrain", headers=owner.headers
        )
        body = assert_problem(r, 409, "conflict")
        assert "NODELOOM_COMFYUI_POOL" in str(body["detail"])

    async def test_a_drained_server_finishes_its_prompt_and_every_process_sees_it(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        """Drained while it runs a prompt: that run completes there, the next runs go to the
        other server; the drain is in the database, so a process started afterwards (a
        worker, a restart) reads it too."""
        slow = [FakeComfyUI(steps=20, step_seconds=0.05) for _ in range(2)]
        with running(slow[0]), running(slow[1]):
            servers = [{"base_url": s.url} for s in slow]
            credential = (await create(client, owner, {"servers": servers})).json()["id"]
            first = asyncio.ensure_future(
                run_workflow(client, owner, text_graph(comfy_node(credential)))
            )
            busy_url = await asyncio.to_thread(lambda: _busy(slow))
            busy, idle = (slow[0], slow[1]) if slow[0].url == busy_url else (slow[1], slow[0])
            listed = (await client.get(servers_url(credential), headers=owner.headers)).json()
            (row,) = [s for s in listed if s["base_url"] == busy.url]
            assert row["in_flight"] == 1
            r = await client.post(
                f"{servers_url(credential)}/{row['id']}/drain", headers=owner.headers
            )
            assert r.status_code == 200, r.text
            # Two at once: undrained, the busy server would take one when its prompt ends.
            later = await asyncio.gather(
                *(
                    run_workflow(client, owner, text_graph(comfy_node(credential), f"p{i}"))
                    for i in range(2)
                )
            )
            done = await first
        assert done["status"] == "completed", done
        assert all(run["status"] == "completed" for run in later), later
        assert (len(busy.submissions), len(busy.history)) == (1, 1)
        assert len(idle.submissions) == 2

        feed = DrainFeed(app.state.ctx.settings, app.state.ctx.db)
        drained = await app.state.ctx.db.read(comfyui_drains.drained)
        assert (f"credential:{credential}", busy.url) in drained
        await feed.poll()  # another process's feed: its fleet takes the drain on creation
        fleet = comfyui_fleet.fleet_of(
            app.state.ctx.settings,
            policy.Credential(credential, "comfyui", {"servers": servers}, {}),
        )
        assert fleet is not None
        assert [s.draining for s in fleet.listed()] == [s is busy for s in slow]


def _busy(fakes: list[FakeComfyUI]) -> str:
    """The URL of the fake that starts a prompt first."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for fake in fakes:
            if fake.running:
                return fake.url
        time.sleep(0.01)
    raise AssertionError("no prompt started")
