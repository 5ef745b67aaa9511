"""Workflow apps over HTTP: publishing (owner), the public form and runs (a visitor with no
account), the pinned version, visitor isolation, budgets, rate limits, concurrency, password,
private access, unpublish. The key paths also on PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest

from nodeloom.db.models import utcnow
from nodeloom.engine import app_challenge
from tests.api.test_assets import _noise_png
from tests.api.test_auth import assert_problem
from tests.conftest import TEST_SECRET, User
from tests.runs_helpers import balance, create_workflow, e, g, n


def hello_graph(template: str = "Hello {{ text }}!") -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", key="name", text="world"),
            n("tpl", "TextTemplate", template=template),
        ],
        [e("in", "tpl")],
    )


def delay_graph(seconds: float) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", key="name", text="hi"),
            n("d", "Delay", seconds=seconds),
            n("tpl", "TextTemplate", template="{{ text }}!"),
        ],
        [e("in", "d"), e("d", "tpl")],
    )


async def publish(
    client: httpx.AsyncClient, user: User, workflow_id: str, **body: Any
) -> dict[str, Any]:
    payload = {
        "workflow_id": workflow_id,
        "title": "Greeter",
        "inputs": [{"key": "name", "label": "Your name", "max_length": 40}],
        "outputs": [{"node_id": "tpl", "label": "Greeting"}],
        **body,
    }
    r = await client.post("/api/v1/apps", json=payload, headers=user.headers)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def visit(
    client: httpx.AsyncClient, slug: str, name: str = "Ada", headers: dict[str, str] | None = None
) -> httpx.Response:
    return await client.post(
        f"/api/v1/public/apps/{slug}/runs", json={"input": {"name": name}}, headers=headers
    )


async def run_of(
    client: httpx.AsyncClient, slug: str, started: httpx.Response, timeout: float = 30
) -> dict[str, Any]:
    """The visitor's record of the run ``started`` answered, once it has ended."""
    assert started.status_code == 202, started.text
    body = started.json()
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        r = await client.get(
            f"/api/v1/public/apps/{slug}/runs/{body['run_id']}",
            headers={"X-Visitor-Token": body["visitor_token"]},
        )
        assert r.status_code == 200, r.text
        record: dict[str, Any] = r.json()
        if record["status"] != "running":
            return record
        assert time.monotonic() < deadline, record
        await asyncio.sleep(delay)
        delay = min(0.25, delay * 1.5)


class TestPublish:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_create_list_get_update_delete(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf)
        assert app["workflow_version"] == 1 and app["access"] == "link"
        assert len(app["slug"]) >= 20 and app["url"].endswith(f"/apps/{app['slug']}")
        assert app["inputs"] == [
            {
                "key": "name",
                "label": "Your name",
                "help": "",
                "default": None,
                "max_length": 40,
                "required": True,
                "kind": "text",
            }
        ]
        assert app["has_password"] is False and app["spent_total"] == 0
        listed = (await client.get("/api/v1/apps", headers=owner.headers)).json()
        assert [a["id"] for a in listed] == [app["id"]]
        # One workflow's apps only (the editor's dialog lists them).
        wf2 = await create_workflow(client, owner, hello_graph())
        app2 = await publish(client, owner, wf2)
        for workflow, expected in ((wf, [app["id"]]), (wf2, [app2["id"]]), ("nope", [])):
            r = await client.get(
                "/api/v1/apps", params={"workflow_id": workflow}, headers=owner.headers
            )
            assert [a["id"] for a in r.json()] == expected
        await client.delete(f"/api/v1/apps/{app2['id']}", headers=owner.headers)
        got = await client.get(f"/api/v1/apps/{app['id']}", headers=owner.headers)
        assert got.json() == app
        # Another account sees nothing: not in its list, 404 like an unknown id.
        assert (await client.get("/api/v1/apps", headers=other.headers)).json() == []
        for method in ("GET", "PATCH", "DELETE"):
            r = await client.request(
                method, f"/api/v1/apps/{app['id']}", json={}, headers=other.headers
            )
            assert_problem(r, 404, "not_found")
        r = await client.patch(
            f"/api/v1/apps/{app['id']}",
            json={"title": "Hello", "password": "s3cret!", "budget_daily": 10},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        assert r.json()["title"] == "Hello" and r.json()["has_password"] is True
        assert r.json()["budget_daily"] == 10
        r = await client.delete(f"/api/v1/apps/{app['id']}", headers=owner.headers)
        assert r.status_code == 204
        assert_problem(await client.get(f"/api/v1/public/apps/{app['slug']}"), 404, "not_found")
        assert_problem(
            await client.get(f"/api/v1/apps/{app['id']}", headers=owner.headers), 404, "not_found"
        )

    async def test_form_must_match_the_version(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        r = await client.post(
            "/api/v1/apps",
            json={
                "workflow_id": wf,
                "title": "x",
                "inputs": [{"key": "nope"}],
                "outputs": [{"node_id": "missing"}],
            },
            headers=owner.headers,
        )
        body = assert_problem(r, 400, "invalid_request")
        pointers = {p["pointer"] for p in body["errors"]}  # type: ignore[attr-defined]
        assert pointers == {"/inputs/0/key", "/outputs/0/node_id"}
        r = await client.post(
            "/api/v1/apps", json={"workflow_id": wf, "title": "x"}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_request")  # outputs are required
        r = await client.post(
            "/api/v1/apps",
            json={"workflow_id": wf, "title": "x", "outputs": [{"node_id": "tpl"}], "access": "x"},
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_request")
        r = await client.post(
            "/api/v1/apps",
            json={"workflow_id": wf, "title": "x", "outputs": [{"node_id": "tpl"}]},
            headers=other.headers,
        )
        assert_problem(r, 404, "not_found")
        r = await client.post(
            "/api/v1/apps",
            json={
                "workflow_id": wf,
                "workflow_version": 7,
                "title": "x",
                "outputs": [{"node_id": "tpl"}],
            },
            headers=owner.headers,
        )
        assert_problem(r, 404, "not_found")
        r = await client.post(
            "/api/v1/apps",
            json={
                "workflow_id": wf,
                "title": "x",
                "outputs": [{"node_id": "tpl"}],
                "frame_ancestors": ["https://ok.example", "javascript:alert(1)"],
            },
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_request")
        # Without inputs: every input node of the version, labelled by its key.
        app = await publish(client, owner, wf, inputs=None)
        assert [(f["key"], f["label"]) for f in app["inputs"]] == [("name", "name")]

    async def test_visitor_runs_the_app_charged_to_the_owner(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf)
        before = await balance(client, owner)
        form = await client.get(f"/api/v1/public/apps/{app['slug']}")
        assert form.status_code == 200, form.text
        assert set(form.json()) == {
            "slug",
            "title",
            "description",
            "cover_url",
            "inputs",
            "outputs",
            "password_required",
            "challenge",
        }
        assert "graph_json" not in form.text and wf not in form.text
        started = await visit(client, app["slug"])
        assert started.headers["Location"].endswith(started.json()["run_id"])
        record = await run_of(client, app["slug"], started)
        assert record["status"] == "completed" and record["progress"] == 1.0
        [out] = record["outputs"]
        assert out["node_id"] == "tpl" and out["text"] == "Hello Ada!"
        assert "node_runs" not in record and "input" not in record
        download = await client.get(out["url"])  # signed: no credential needed
        assert download.status_code == 200 and download.text == "Hello Ada!"
        used = started.json()["estimated_credits"]
        assert await balance(client, owner) == before - used
        # The owner sees the run among its own, started by the app.
        runs = (await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)).json()
        assert runs[0]["trigger"] == "app"
        spent = (await client.get(f"/api/v1/apps/{app['id']}", headers=owner.headers)).json()
        assert spent["spent_total"] == used == spent["spent_today"]


class TestVisitors:
    async def test_a_pinned_version_after_the_workflow_changed(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf)
        r = await client.patch(
            f"/api/v1/workflows/{wf}",
            json={"graph_json": hello_graph("Bye {{ text }}.")},
            headers=owner.headers,
        )
        assert r.status_code == 200 and r.json()["version"] == 2
        record = await run_of(client, app["slug"], await visit(client, app["slug"]))
        assert record["outputs"][0]["text"] == "Hello Ada!"
        owner_run = await client.get(
            f"/api/v1/workflows/{wf}/runs/{record['run_id']}", headers=owner.headers
        )
        assert owner_run.json()["workflow_version"] == 1
        # Publishing again moves it to the new version.
        r = await client.patch(
            f"/api/v1/apps/{app['id']}", json={"workflow_version": 2}, headers=owner.headers
        )
        assert r.status_code == 200, r.text
        record = await run_of(client, app["slug"], await visit(client, app["slug"]))
        assert record["outputs"][0]["text"] == "Bye Ada."

    async def test_visitors_are_isolated(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf)
        first = await visit(client, app["slug"], "One")
        second = await visit(client, app["slug"], "Two")
        await run_of(client, app["slug"], first)
        mine, theirs = first.json(), second.json()
        # Another visitor's token, no token, a made-up token: the run is unknown.
        for headers in ({"X-Visitor-Token": theirs["visitor_token"]}, {}, {"X-Visitor-Token": "x"}):
            r = await client.get(
                f"/api/v1/public/apps/{app['slug']}/runs/{mine['run_id']}", headers=headers
            )
            assert_problem(r, 404, "not_found")
        # A run of the owner's, not started by the app, is not reachable through it.
        own = await client.post(f"/api/v1/workflows/{wf}/execute", headers=owner.headers)
        r = await client.get(
            f"/api/v1/public/apps/{app['slug']}/runs/{own.json()['run_id']}",
            headers={"X-Visitor-Token": mine["visitor_token"]},
        )
        assert_problem(r, 404, "not_found")
        # The owner's data stays the owner's: another account cannot read the app's runs.
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{mine['run_id']}", headers=other.headers)
        assert_problem(r, 404, "not_found")
        # ?token= works too (EventSource cannot set headers).
        r = await client.get(
            f"/api/v1/public/apps/{app['slug']}/runs/{mine['run_id']}",
            params={"token": mine["visitor_token"]},
        )
        assert r.status_code == 200

    async def test_the_form_is_enforced(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf)
        slug = app["slug"]
        url = f"/api/v1/public/apps/{slug}/runs"
        assert_problem(await client.post(url, json={"input": {}}), 400, "invalid_request")
        assert_problem(await visit(client, slug, "x" * 41), 400, "invalid_request")
        assert_problem(await client.post(url, json={"input": {"name": 3}}), 400, "invalid_request")
        assert_problem(await client.post(url, json={"input": "x"}), 400, "invalid_request")
        assert_problem(await client.post(url, json=[1]), 400, "invalid_request")
        r = await client.post(url, content=b"{nope", headers={"Content-Type": "application/json"})
        assert_problem(r, 400, "invalid_request")
        # A key the form does not show never reaches the run.
        started = await client.post(url, json={"input": {"name": "Bo", "text": "sneaky"}})
        record = await run_of(client, slug, started)
        assert record["outputs"][0]["text"] == "Hello Bo!"
        assert_problem(await client.get("/api/v1/public/apps/not-a-slug"), 404, "not_found")
        assert_problem(await visit(client, "not-a-slug"), 404, "not_found")

    async def test_files_become_the_owners_uploads(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [n("photo", "ImageInput", key="photo"), n("small", "ImageResize", width=8, height=6)],
            [e("photo", "small")],
        )
        wf = await create_workflow(client, owner, graph)
        app = await publish(
            client,
            owner,
            wf,
            inputs=[{"key": "photo", "label": "Photo"}],
            outputs=[{"node_id": "small"}],
        )
        assert app["inputs"][0]["kind"] == "image"
        url = f"/api/v1/public/apps/{app['slug']}/runs"
        # An id (of the owner's asset or anything else) is refused: only a file itself.
        r = await client.post(
            url, json={"input": {"photo": "0190d0d0-0000-7000-8000-000000000000"}}
        )
        assert_problem(r, 400, "invalid_request")
        assert_problem(await client.post(url, json={"input": {}}), 400, "invalid_request")
        started = await client.post(url, files={"photo": ("cat.png", _noise_png(3), "image/png")})
        record = await run_of(client, app["slug"], started, timeout=60)
        assert record["status"] == "completed", record
        assert record["outputs"][0]["content_type"] == "image/png"
        image = await client.get(record["outputs"][0]["url"])
        assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
        assets = (await client.get("/api/v1/assets", headers=owner.headers)).json()
        assert len(assets) == 1
        r = await client.post(url, files={"other": ("cat.png", _noise_png(4), "image/png")})
        assert_problem(r, 400, "invalid_request")


class TestLimits:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_a_spent_budget_refuses_new_runs(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf)
        first = await visit(client, app["slug"])
        cost = first.json()["estimated_credits"]
        assert cost > 0
        await run_of(client, app["slug"], first)
        r = await client.patch(
            f"/api/v1/apps/{app['id']}", json={"budget_total": cost}, headers=owner.headers
        )
        assert r.status_code == 200
        before = await balance(client, owner)
        # (A new input each time: a repeat would be an output-cache hit, which costs nothing.)
        r = await visit(client, app["slug"], "Bob")
        body = assert_problem(r, 402, "app_budget_exhausted")
        assert body["budget"] == "total"
        assert await balance(client, owner) == before  # nothing held or charged
        await client.patch(
            f"/api/v1/apps/{app['id']}",
            json={"budget_total": None, "budget_daily": cost},
            headers=owner.headers,
        )
        r = await visit(client, app["slug"], "Cy")
        body = assert_problem(r, 402, "app_budget_exhausted")
        assert body["budget"] == "daily" and int(r.headers["Retry-After"]) > 0
        await client.patch(
            f"/api/v1/apps/{app['id']}", json={"budget_daily": 2 * cost}, headers=owner.headers
        )
        await run_of(client, app["slug"], await visit(client, app["slug"], "Di"))
        assert_problem(await visit(client, app["slug"], "Ed"), 402, "app_budget_exhausted")
        runs = (await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)).json()
        assert len(runs) == 2  # the refused ones left no run behind

    async def test_at_most_max_concurrent_runs(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, delay_graph(30))
        app = await publish(client, owner, wf, max_concurrent=1)
        first = await visit(client, app["slug"])
        assert first.status_code == 202, first.text
        assert_problem(await visit(client, app["slug"]), 429, "rate_limited")
        await client.post(
            f"/api/v1/workflows/{wf}/runs/{first.json()['run_id']}/cancel", headers=owner.headers
        )
        record = await run_of(client, app["slug"], first)
        assert record["status"] in ("failed", "cancelled")
        assert record["error"]["code"] == "cancelled"
        second = await visit(client, app["slug"])
        assert second.status_code == 202, second.text
        # Ended here: a Delay left running holds the app's shutdown for its grace period.
        await client.post(
            f"/api/v1/workflows/{wf}/runs/{second.json()['run_id']}/cancel", headers=owner.headers
        )
        assert (await run_of(client, app["slug"], second))["status"] in ("failed", "cancelled")


class TestAbuse:
    async def test_rate_limits_by_visitor_and_by_address(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf, rate_per_visitor=2, rate_per_ip=3)
        one = {"X-Visitor-Session": "one"}
        assert (await visit(client, app["slug"], headers=one)).status_code == 202
        assert (await visit(client, app["slug"], headers=one)).status_code == 202
        r = await visit(client, app["slug"], headers=one)
        assert_problem(r, 429, "rate_limited")
        assert r.headers["RateLimit-Limit"] == "2" and int(r.headers["Retry-After"]) > 0
        # Another session of the same address: its own slots, until the address's run out.
        two = {"X-Visitor-Session": "two"}
        assert (await visit(client, app["slug"], headers=two)).status_code == 202
        r = await visit(client, app["slug"], headers=two)
        assert_problem(r, 429, "rate_limited")
        assert r.headers["RateLimit-Limit"] == "3"
        # Refused runs (a bad form) take no slot.
        app2 = await publish(client, owner, wf, rate_per_visitor=1)
        for _ in range(3):
            assert_problem(await visit(client, app2["slug"], "x" * 99), 400, "invalid_request")
        assert (await visit(client, app2["slug"])).status_code == 202

    async def test_password(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf, password="open sesame")
        form = await client.get(f"/api/v1/public/apps/{app['slug']}")
        assert form.json()["password_required"] is True
        assert_problem(await visit(client, app["slug"]), 401, "invalid_credentials")
        r = await visit(client, app["slug"], headers={"X-App-Password": "wrong"})
        assert_problem(r, 401, "invalid_credentials")
        r = await visit(client, app["slug"], headers={"X-App-Password": "open sesame"})
        assert r.status_code == 202

    async def test_private_apps_are_the_owners_only(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf, access="private")
        path = f"/api/v1/public/apps/{app['slug']}"
        assert_problem(await client.get(path), 404, "not_found")
        assert_problem(await client.get(path, headers=other.headers), 404, "not_found")
        assert_problem(await visit(client, app["slug"], headers=other.headers), 404, "not_found")
        assert (await client.get(path, headers=owner.headers)).status_code == 200
        assert (await visit(client, app["slug"], headers=owner.headers)).status_code == 202

    async def test_unpublished_answers_404_at_once(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf)
        started = await visit(client, app["slug"])
        await run_of(client, app["slug"], started)
        r = await client.patch(
            f"/api/v1/apps/{app['id']}", json={"published": False}, headers=owner.headers
        )
        assert r.status_code == 200 and r.json()["published"] is False
        path = f"/api/v1/public/apps/{app['slug']}"
        assert_problem(await client.get(path), 404, "not_found")
        assert_problem(await visit(client, app["slug"]), 404, "not_found")
        r = await client.get(
            f"{path}/runs/{started.json()['run_id']}",
            headers={"X-Visitor-Token": started.json()["visitor_token"]},
        )
        assert_problem(r, 404, "not_found")
        # Deleting the workflow closes the app too.
        await client.patch(
            f"/api/v1/apps/{app['id']}", json={"published": True}, headers=owner.headers
        )
        assert (await client.get(path)).status_code == 200
        await client.delete(f"/api/v1/workflows/{wf}", headers=owner.headers)
        assert_problem(await client.get(path), 404, "not_found")


def solve(token: str, bits: int) -> str:
    """A solution of the challenge ``token``: what the page's script finds."""
    for counter in itertools.count():
        digest = hashlib.sha256(f"{token}:{counter}".encode()).digest()
        if app_challenge.zero_bits(digest) >= bits:
            return str(counter)
    raise AssertionError  # pragma: no cover - count() never ends


async def challenge_of(client: httpx.AsyncClient, slug: str) -> dict[str, Any]:
    form = await client.get(f"/api/v1/public/apps/{slug}")
    assert form.status_code == 200, form.text
    challenge: dict[str, Any] = form.json()["challenge"]
    return challenge


def proof(token: str, solution: str) -> dict[str, str]:
    return {"X-App-Challenge": token, "X-App-Solution": solution}


class TestChallenge:
    """The optional proof of work: a valid, unexpired, unused solution starts one run."""

    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_a_run_needs_a_fresh_solution(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf, access="public", challenge_bits=10)
        assert app["challenge_bits"] == 10
        challenge = await challenge_of(client, app["slug"])
        assert challenge["bits"] == 10
        assert challenge["algorithm"] == "sha256-leading-zero-bits"
        token = challenge["token"]
        # None sent, or a solution that does not solve it: refused, and no run started.
        body = assert_problem(await visit(client, app["slug"]), 403, "challenge_failed")
        assert body["reason"] == "missing"
        wrong = next(
            str(i)
            for i in itertools.count()
            if app_challenge.zero_bits(hashlib.sha256(f"{token}:{i}".encode()).digest()) < 10
        )
        r = await visit(client, app["slug"], headers=proof(token, wrong))
        assert assert_problem(r, 403, "challenge_failed")["reason"] == "wrong"
        runs = (await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)).json()
        assert runs == []
        # Solved: the run starts. The same solution again (a replay): refused.
        solution = solve(token, 10)
        started = await visit(client, app["slug"], headers=proof(token, solution))
        assert (await run_of(client, app["slug"], started))["status"] == "completed"
        r = await visit(client, app["slug"], "Bob", headers=proof(token, solution))
        assert assert_problem(r, 403, "challenge_failed")["reason"] == "used"
        # Each form read hands out a new challenge, which starts one more run.
        fresh = await challenge_of(client, app["slug"])
        assert fresh["token"] != token
        r = await visit(
            client, app["slug"], "Bob", headers=proof(fresh["token"], solve(fresh["token"], 10))
        )
        assert r.status_code == 202, r.text

    async def test_expired_forged_and_other_apps_challenges(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        app = await publish(client, owner, wf, access="public", challenge_bits=6)
        other = await publish(client, owner, wf, access="public", challenge_bits=6)
        secret = TEST_SECRET.encode()
        # Handed out by this server 11 minutes ago: past its 10 minutes.
        old = app_challenge.issue(secret, app["id"], 6, utcnow() - timedelta(minutes=11))
        token = str(old["token"])
        r = await visit(client, app["slug"], headers=proof(token, solve(token, 6)))
        assert assert_problem(r, 403, "challenge_failed")["reason"] == "expired"
        # Made with another key, or for another app, or tampered with: invalid.
        forged = str(app_challenge.issue(b"not the server's", app["id"], 6, utcnow())["token"])
        theirs = (await challenge_of(client, other["slug"]))["token"]
        mine = (await challenge_of(client, app["slug"]))["token"]
        easier = mine.replace(".6.", ".1.", 1)
        for bad in (forged, theirs, easier, "x", "a.b.c.d.e"):
            r = await visit(client, app["slug"], headers=proof(bad, solve(bad, 6)))
            assert assert_problem(r, 403, "challenge_failed")["reason"] == "invalid", bad
        # The owner makes the app harder: challenges handed out before are too easy now.
        await client.patch(
            f"/api/v1/apps/{app['id']}", json={"challenge_bits": 8}, headers=owner.headers
        )
        r = await visit(client, app["slug"], headers=proof(mine, solve(mine, 6)))
        assert assert_problem(r, 403, "challenge_failed")["reason"] == "invalid"
        # And switches it off: the form has no challenge, runs need none.
        r = await client.patch(
            f"/api/v1/apps/{app['id']}", json={"challenge_bits": None}, headers=owner.headers
        )
        assert r.json()["challenge_bits"] is None
        assert (await challenge_of(client, app["slug"])) is None
        assert (await visit(client, app["slug"])).status_code == 202

    async def test_the_difficulty_is_bounded(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, hello_graph())
        for bits in (0, 25, "many"):
            r = await client.post(
                "/api/v1/apps",
                json={
                    "workflow_id": wf,
                    "title": "t",
                    "outputs": [{"node_id": "tpl"}],
                    "challenge_bits": bits,
                },
                headers=owner.headers,
            )
            assert_problem(r, 400, "invalid_request")
        # An over-long solution header is a 400 too, never a 500.
        app = await publish(client, owner, wf, challenge_bits=4)
        r = await visit(client, app["slug"], headers=proof("t", "9" * 65))
        assert_problem(r, 400, "invalid_request")
