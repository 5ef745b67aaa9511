"""Approval nodes over HTTP on SQLite (in-process driver) and PostgreSQL (queue workers): the
run waits (node ``waiting``, run ``running``) until a person approves or rejects through the
API or a signed link, or until the timeout decides; the branch not taken is skipped; another
account sees nothing; a second decision is a conflict."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.db.models import utcnow
from nodeloom.engine import hook_signals
from nodeloom.settings import Settings
from nodeloom.store import approvals as approval_store
from tests.api.test_auth import assert_problem
from tests.conftest import User, drop_connections
from tests.runs_helpers import create_workflow, edge, execute, g, n, wait_for_run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


def gated(**approval: Any) -> dict[str, Any]:
    """in -> gate (Approval) -approved-> yes; -rejected-> no."""
    return g(
        [
            n("in", "TextInput", text="a draft"),
            n("gate", "Approval", prompt="Post this?", **approval),
            n("yes", "TextTemplate", template="posted: {{ text }}"),
            n("no", "TextTemplate", template="dropped: {{ text }}"),
        ],
        [
            {"id": "1", "source": "in", "target": "gate"},
            {"id": "2", "source": "gate", "target": "yes", "sourceHandle": "approved"},
            {"id": "3", "source": "gate", "target": "no", "sourceHandle": "rejected"},
        ],
    )


async def start(client: httpx.AsyncClient, user: User, graph: dict[str, Any]) -> tuple[str, str]:
    wf = await create_workflow(client, user, graph)
    r = await execute(client, user, wf, {"cache": False})
    assert r.status_code == 202, r.text
    return wf, str(r.json()["run_id"])


async def pending(
    client: httpx.AsyncClient, user: User, run_id: str, timeout: float = 30.0
) -> dict[str, Any]:
    """The approval of ``run_id`` once it is listed (the node is waiting)."""
    return (await all_pending(client, user, run_id, 1, timeout))[0]


def statuses(run: dict[str, Any]) -> dict[str, str]:
    return {node["node_id"]: node["status"] for node in run["node_runs"]}


async def text_of(client: httpx.AsyncClient, user: User, run: dict[str, Any], node: str) -> str:
    artifact = next(x["artifact_id"] for x in run["node_runs"] if x["node_id"] == node)
    r = await client.get(f"/api/v1/artifacts/{artifact}", headers=user.headers)
    assert r.status_code == 200, r.text
    return r.text


def local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


class TestDecisions:
    async def test_approve_with_edited_text_runs_the_approved_branch(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated(allow_edit=True))
        item = await pending(client, owner, run_id)
        assert item["node_id"] == "gate" and item["workflow_id"] == wf
        assert item["prompt"] == "Post this?" and item["status"] == "pending"
        assert item["input"]["text"] == "a draft"
        assert item["expires_at"] > item["created_at"]
        run = (
            await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=owner.headers)
        ).json()
        assert run["status"] == "running"
        assert statuses(run)["gate"] == "waiting"

        r = await client.post(
            f"/api/v1/approvals/{item['id']}/approve",
            json={"comment": "fine", "text": "the final text"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "approved" and r.json()["comment"] == "fine"
        assert r.json()["decided_by"] == "api"

        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed", done
        assert statuses(done) == {
            "in": "completed",
            "gate": "completed",
            "yes": "completed",
            "no": "skipped",
        }
        assert await text_of(client, owner, done, "yes") == "posted: the final text"
        gate = next(x for x in done["node_runs"] if x["node_id"] == "gate")
        assert gate["credits_used"] == 0
        r = await client.get(f"/api/v1/approvals/{item['id']}", headers=owner.headers)
        assert r.json()["text"] == "the final text" and r.json()["approve_url"] is None
        assert (await client.get("/api/v1/approvals", headers=owner.headers)).json()["count"] == 0

    async def test_reject_runs_the_rejected_branch_with_the_input(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        r = await client.post(
            f"/api/v1/approvals/{item['id']}/reject",
            json={"comment": "off brand"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed"
        assert statuses(done)["yes"] == "skipped" and statuses(done)["no"] == "completed"
        assert await text_of(client, owner, done, "no") == "dropped: a draft"

    async def test_the_timeout_takes_its_outcome(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated(timeout_seconds=1, timeout_outcome="approve"))
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed"
        assert statuses(done)["yes"] == "completed" and statuses(done)["no"] == "skipped"
        assert await text_of(client, owner, done, "yes") == "posted: a draft"


class TestRefusals:
    async def test_another_account_sees_and_decides_nothing(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        listed = (await client.get("/api/v1/approvals", headers=other.headers)).json()
        assert listed == {"data": [], "count": 0}
        for path in (f"/approvals/{item['id']}/approve", f"/approvals/{item['id']}/reject"):
            r = await client.post(f"/api/v1{path}", json={}, headers=other.headers)
            assert_problem(r, 404, "not_found")
        r = await client.get(f"/api/v1/approvals/{item['id']}", headers=other.headers)
        assert_problem(r, 404, "not_found")
        r = await client.post(f"/api/v1/approvals/{item['id']}/approve")
        assert_problem(r, 401, "unauthorized")
        await client.post(f"/api/v1/approvals/{item['id']}/reject", headers=owner.headers)
        await wait_for_run(client, owner, wf, run_id, timeout=60)

    async def test_a_second_decision_is_a_conflict(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        url = f"/api/v1/approvals/{item['id']}"
        r = await client.post(f"{url}/approve", headers=owner.headers)
        assert r.status_code == 200, r.text
        for action in ("approve", "reject"):
            r = await client.post(f"{url}/{action}", json={}, headers=owner.headers)
            body = assert_problem(r, 409, "conflict")
            assert body["status"] == 409
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert statuses(done)["yes"] == "completed"

    async def test_bad_bodies_are_problems(self, client: httpx.AsyncClient, owner: User) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        url = f"/api/v1/approvals/{item['id']}/approve"
        h = owner.headers
        for body in ({"comment": 5}, {"comment": "x" * 4001}, {"surprise": 1}, [1]):
            assert_problem(await client.post(url, json=body, headers=h), 400, "invalid_request")
        r = await client.post(url, content=b"{not json", headers=h)
        assert_problem(r, 400, "invalid_request")
        # This node does not allow editing.
        body = assert_problem(
            await client.post(url, json={"text": "mine"}, headers=h), 400, "invalid_request"
        )
        assert body["errors"][0]["pointer"] == "/text"
        # Still pending after all of them.
        assert (await pending(client, owner, run_id))["status"] == "pending"
        await client.post(url, headers=h)
        await wait_for_run(client, owner, wf, run_id, timeout=60)


class TestSignedLinks:
    async def test_a_get_shows_a_page_and_the_post_decides(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        link = local(item["reject_url"])

        page = await client.get(link)
        assert page.status_code == 200, page.text
        assert page.headers["content-type"].startswith("text/html")
        assert "Post this?" in page.text and "<form method=post" in page.text
        # The GET decided nothing.
        assert (await pending(client, owner, run_id))["status"] == "pending"

        # A link signed for reject does not approve.
        approve_with_reject_sig = link.replace("/reject?", "/approve?")
        assert_problem(await client.post(approve_with_reject_sig), 401, "unauthorized")
        # A tampered signature is refused, on the page and on the decision.
        bad = link[:-4] + ("0000" if not link.endswith("0000") else "1111")
        assert_problem(await client.get(bad), 401, "unauthorized")
        assert_problem(await client.post(bad, data={"comment": "x"}), 401, "unauthorized")

        r = await client.post(link, data={"comment": "from my phone"})
        assert r.status_code == 200, r.text
        assert "Rejected" in r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert statuses(done)["no"] == "completed"
        decided = (
            await client.get(f"/api/v1/approvals/{item['id']}", headers=owner.headers)
        ).json()
        assert decided["decided_by"] == "link" and decided["comment"] == "from my phone"
        # Used once: the link now finds nothing to decide.
        assert (await client.post(link)).status_code == 409

    async def test_the_waiting_event_carries_the_links(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        await client.post(f"/api/v1/approvals/{item['id']}/approve", headers=owner.headers)
        await wait_for_run(client, owner, wf, run_id, timeout=60)
        # The stream replays the run's log and ends with its final event.
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}/events", headers=owner.headers)
        assert r.status_code == 200, r.text
        waiting = [
            json.loads(line[len("data: ") :])
            for line in r.text.splitlines()
            if line.startswith("data: ") and '"node.waiting"' in line
        ]
        assert len(waiting) == 1, r.text
        data = waiting[0]["data"]
        assert waiting[0]["node_id"] == "gate" and data["approval_id"] == item["id"]
        assert "/approvals/" in data["approve_url"] and "sig=" in data["reject_url"]


class TestCancelled:
    async def test_a_cancelled_run_leaves_nothing_to_decide(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202, r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "cancelled"
        assert statuses(done)["gate"] == "cancelled"
        listed = (await client.get("/api/v1/approvals", headers=owner.headers)).json()
        assert listed["count"] == 0
        r = await client.post(f"/api/v1/approvals/{item['id']}/approve", headers=owner.headers)
        assert_problem(r, 409, "conflict")
        assert (await client.post(local(item["approve_url"]))).status_code == 409


class TestMedia:
    async def test_an_image_is_judged_and_passed_on_as_it_is(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput", text="A poster"),
                n("card", "RenderText", width=64, height=64),
                n("gate", "Approval", kind="image", prompt="Post this image?"),
            ],
            [
                {"id": "1", "source": "in", "target": "card"},
                {"id": "2", "source": "card", "target": "gate"},
            ],
        )
        wf, run_id = await start(client, owner, graph)
        item = await pending(client, owner, run_id)
        assert item["kind"] == "image" and item["input"]["content_type"] == "image/png"
        assert item["input"]["text"] is None
        shown = await client.get(local(item["input"]["url"]))
        assert shown.status_code == 200 and shown.content.startswith(b"\x89PNG")
        r = await client.post(f"/api/v1/approvals/{item['id']}/approve", headers=owner.headers)
        assert r.status_code == 200, r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed"
        gate = next(x for x in done["node_runs"] if x["node_id"] == "gate")
        meta = await client.get(
            f"/api/v1/artifacts/{gate['artifact_id']}/metadata", headers=owner.headers
        )
        assert meta.json()["content_type"] == "image/png"
        out = await client.get(f"/api/v1/artifacts/{gate['artifact_id']}", headers=owner.headers)
        assert out.content == shown.content

    async def test_the_kind_is_checked_at_save(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        text_into_image = g(
            [n("in", "TextInput", text="x"), n("gate", "Approval", kind="image")],
            [{"id": "1", "source": "in", "target": "gate"}],
        )
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "bad", "graph_json": text_into_image},
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_graph")
        edit_an_image = g([n("gate", "Approval", kind="image", allow_edit=True)], [])
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "bad", "graph_json": edit_an_image},
            headers=owner.headers,
        )
        body = assert_problem(r, 400, "invalid_graph")
        errors = body["errors"]
        assert isinstance(errors, list)
        pointers = [e["pointer"] for e in errors]
        assert "/graph_json/nodes/0/data/allow_edit" in pointers


async def all_pending(
    client: httpx.AsyncClient, user: User, run_id: str, count: int, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """The ``count`` approvals of ``run_id`` once they are all listed."""
    deadline = time.monotonic() + timeout
    while True:
        r = await client.get("/api/v1/approvals", headers=user.headers)
        assert r.status_code == 200, r.text
        mine = [dict(item) for item in r.json()["data"] if item["run_id"] == run_id]
        if len(mine) >= count:
            return mine
        assert time.monotonic() < deadline, f"{len(mine)} approvals for {run_id}: {r.json()}"
        await asyncio.sleep(0.05)


class TestInRegions:
    async def test_each_item_of_a_for_each_waits_for_its_own_decision(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("each", "ForEach", concurrency=3),
                n("gate", "Approval", prompt="Post this line?"),
                n("yes", "TextTemplate", template="posted: {{ text }}"),
                n("all", "Collect"),
            ],
            [
                edge("in", "each"),
                edge("each", "gate"),
                edge("gate", "yes", "approved"),
                edge("yes", "all"),
            ],
        )
        wf = await create_workflow(client, owner, graph)
        r = await execute(client, owner, wf, {"input": {"text": "one\ntwo\nthree"}, "cache": False})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        items = await all_pending(client, owner, run_id, 3)
        by_text = {item["input"]["text"]: item for item in items}
        assert set(by_text) == {"one", "two", "three"}
        assert {(item["node_id"], item["item_index"]) for item in items} == {
            ("gate", 0),
            ("gate", 1),
            ("gate", 2),
        }
        assert by_text["two"]["item_index"] == 1
        for text, action in (("one", "approve"), ("two", "reject"), ("three", "approve")):
            r = await client.post(
                f"/api/v1/approvals/{by_text[text]['id']}/{action}", headers=owner.headers
            )
            assert r.status_code == 200, r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed", done
        yes = {nr["item_index"]: nr["status"] for nr in done["node_runs"] if nr["node_id"] == "yes"}
        assert yes == {0: "completed", 1: "skipped", 2: "completed"}
        assert done["credits_used"] == 2
        collected = next(nr for nr in done["node_runs"] if nr["node_id"] == "all")
        r = await client.get(f"/api/v1/artifacts/{collected['artifact_id']}", headers=owner.headers)
        assert json.loads(r.text) == ["posted: one", None, "posted: three"]  # a rejected item

    async def test_a_person_is_the_judge_of_a_repeat(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """Regenerate until approved: a rejection sends the draft round again, an approval
        ends the loop; each iteration has its own approval."""
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat", max_iterations=3),
                n("grow", "TextTemplate", template="{{ text }}x"),
                n("gate", "Approval", prompt="Good enough?"),
                n("ok", "TextTemplate", template="ok:{{ text }}"),
                n("again", "TextTemplate", template="{{ text }}"),
                n("join", "Merge"),
                n("until", "Until", operator="starts_with", value="ok:"),
                n("good", "TextTemplate", template="good: {{ text }}"),
            ],
            [
                edge("in", "rep"),
                edge("rep", "grow"),
                edge("grow", "gate"),
                edge("gate", "ok", "approved"),
                edge("gate", "again", "rejected"),
                edge("ok", "join"),
                edge("again", "join"),
                edge("join", "until"),
                edge("until", "good", "done"),
            ],
        )
        wf = await create_workflow(client, owner, graph)
        r = await execute(client, owner, wf, {"input": {"text": "a"}, "cache": False})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        first = await pending(client, owner, run_id)
        assert first["input"]["text"] == "ax"
        assert (first["node_id"], first["item_index"]) == ("gate", 0)
        r = await client.post(f"/api/v1/approvals/{first['id']}/reject", headers=owner.headers)
        assert r.status_code == 200, r.text
        second = await pending(client, owner, run_id)
        assert second["id"] != first["id"] and second["input"]["text"] == "axx"
        assert (second["node_id"], second["item_index"]) == ("gate", 1)
        r = await client.post(f"/api/v1/approvals/{second['id']}/approve", headers=owner.headers)
        assert r.status_code == 200, r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed", done
        gates = sorted(
            (nr["item_index"], nr["status"]) for nr in done["node_runs"] if nr["node_id"] == "gate"
        )
        assert gates == [(0, "completed"), (1, "completed")]
        assert await text_of(client, owner, done, "good") == "good: ok:axx"


class TestDatabaseHiccups:
    @pytest.mark.parametrize("backend", ["postgres"])
    async def test_a_wait_outlives_every_connection_dropped(
        self, client: httpx.AsyncClient, owner: User, settings: Settings
    ) -> None:
        """PostgreSQL restarts (or a proxy drops the connections) while a node waits for a
        person: the decision made afterwards still reaches it and the run completes."""
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        assert settings.database_url is not None
        assert await drop_connections(settings.database_url) > 0
        # As our client does: a 503 (a request that met a dropped connection) is tried again.
        for _ in range(50):
            r = await client.post(f"/api/v1/approvals/{item['id']}/approve", headers=owner.headers)
            if r.status_code != 503:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 200, r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed", done
        assert statuses(done) == {
            "in": "completed",
            "gate": "completed",
            "yes": "completed",
            "no": "skipped",
        }


class TestLookingAgain:
    """A decision whose signal is lost (Redis restarted, a bus that carries no signals between
    processes) still reaches its node: the process looks at all its waiting approvals together,
    one statement per look, however many nodes wait."""

    @pytest.fixture(autouse=True)
    def quick_rechecks(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(hook_signals, "RECHECK", 0.2)

    async def test_a_decision_without_its_signal_still_completes_the_run(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        item = await pending(client, owner, run_id)
        # Decided as another process would, with no signal on this process's bus.
        decided = await app.state.ctx.db.write(
            lambda c: approval_store.decide(c, item["id"], "approved", by="api", now=utcnow())
        )
        assert decided
        done = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert done["status"] == "completed", done
        assert statuses(done)["yes"] == "completed" and statuses(done)["no"] == "skipped"

    @pytest.mark.parametrize("backend", ["sqlite"])
    async def test_many_waiting_nodes_cost_one_read_per_look(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        waiting = 40
        wf = await create_workflow(client, owner, gated())
        for _ in range(waiting):
            r = await execute(client, owner, wf, {"cache": False})
            assert r.status_code == 202, r.text
        r = await client.get("/api/v1/approvals", headers=owner.headers)
        deadline = time.monotonic() + 60
        while r.json()["count"] < waiting:
            assert time.monotonic() < deadline, r.json()["count"]
            await asyncio.sleep(0.05)
            r = await client.get("/api/v1/approvals", headers=owner.headers)
        db = app.state.ctx.db
        started, before = time.monotonic(), db.statements
        await asyncio.sleep(10 * hook_signals.RECHECK)
        looks = (time.monotonic() - started) / hook_signals.RECHECK
        sent = db.statements - before
        # One read per node per look would be 40 x looks; the watch sends one per look (the
        # server's own background work adds a few).
        assert sent < waiting, (sent, looks)
