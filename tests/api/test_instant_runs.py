"""Runs whose nodes are all instant (a text input, templates that only substitute) are
executed while they are accepted: the 202 comes back with the run already finished, and
what it leaves behind (node rows, artifacts, events, ledger) is what a driven run leaves."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.engine.credits import ledger_balance
from nodeloom.engine.executor import INLINE_INPUT_BYTES
from nodeloom.engine.new_run import new_run, read_workflow, write_run
from nodeloom.engine.run_request import RunRequest
from nodeloom.engine.transitions import WorkflowChanged
from nodeloom.errors import NotFound
from nodeloom.store import accounts
from tests.conftest import User
from tests.events.test_sse import parse_sse
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The embedded driver (SQLite) and queue workers (PostgreSQL) alike."""
    return str(request.param)


def chain_graph() -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput"),
            n("a", "TextTemplate", template="<{{ text }}>"),
            n("b", "TextTemplate", template="{{ text }} and {{ input.more }}"),
        ],
        [e("in", "a"), e("a", "b")],
    )


async def run_now(client: httpx.AsyncClient, user: User, wf: str, run_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=user.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def events_of(
    client: httpx.AsyncClient, user: User, wf: str, run_id: str
) -> list[dict[str, Any]]:
    async with client.stream(
        "GET", f"/api/v1/workflows/{wf}/runs/{run_id}/events", headers=user.headers
    ) as r:
        assert r.status_code == 200
        return [frame["data"] for frame in parse_sse((await r.aread()).decode())]


async def ledger_of(app: FastAPI, run_id: str) -> list[tuple[str, str, int]]:
    query = sa.text(
        "select node_id, kind, amount from credit_ledger where run_id = :run order by id"
    )
    rows = await app.state.ctx.db.read(lambda c: c.execute(query, {"run": run_id}).all())
    return [(node_id, kind, amount) for node_id, kind, amount in rows]


def shape(events: list[dict[str, Any]]) -> list[tuple[int, str, str | None]]:
    return [(ev["seq"], ev["type"], ev.get("node_id")) for ev in events]


EXPECTED_EVENTS = [
    (1, "run.started", None),
    (2, "node.started", "in"),
    (3, "node.completed", "in"),
    (4, "node.started", "a"),
    (5, "node.completed", "a"),
    (6, "node.started", "b"),
    (7, "node.completed", "b"),
    (8, "run.completed", None),
]


class TestExecutedWhileAccepted:
    async def test_run_is_finished_when_execute_answers(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, chain_graph())
        before = await balance(client, owner)
        r = await execute(client, owner, wf, {"input": {"text": "x", "more": "y"}})
        assert r.status_code == 202
        assert r.json()["status"] == "running"  # the published answer of an accepted run
        run = await run_now(client, owner, wf, r.json()["run_id"])  # no waiting
        assert run["status"] == "completed" and run["error"] is None
        assert run["credits_used"] == 2 == run["estimated_credits"]
        assert [nr["status"] for nr in run["node_runs"]] == ["completed"] * 3
        for nr in run["node_runs"]:
            assert nr["started_at"] <= nr["finished_at"] and nr["cached"] is False
        last = run["node_runs"][-1]["artifact_id"]
        download = await client.get(f"/api/v1/artifacts/{last}", headers=owner.headers)
        assert download.text == "<x> and y"
        assert await balance(client, owner) == before - 2

    async def test_events_and_ledger_are_those_of_a_driven_run(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, chain_graph())
        instant = (await execute(client, owner, wf, {"input": {"text": "x", "more": "y"}})).json()
        # The same graph with an input too large to render on the event loop: the templates
        # are not instant any more, so the run is accepted pending and driven node by node.
        big = "x" * (INLINE_INPUT_BYTES + 1)
        driven = (await execute(client, owner, wf, {"input": {"text": big, "more": "y"}})).json()
        assert (await run_now(client, owner, wf, driven["run_id"]))["status"] == "running"
        await wait_for_run(client, owner, wf, driven["run_id"])

        for run_id in (instant["run_id"], driven["run_id"]):
            events = await events_of(client, owner, wf, run_id)
            assert shape(events) == EXPECTED_EVENTS
            completed = [ev for ev in events if ev["type"] == "node.completed"]
            assert [ev["data"]["credits_used"] for ev in completed] == [0, 1, 1]
            assert events[-1]["data"]["credits_used"] == 2
            assert await ledger_of(app, run_id) == [
                ("", "hold", 2),
                ("a", "charge", 1),
                ("b", "charge", 1),
            ]
        assert await app.state.ctx.db.read(lambda c: ledger_balance(c, owner.id)) == await balance(
            client, owner
        )

    async def test_cache_hits_are_free_and_shared(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, chain_graph())
        body = {"input": {"text": "same", "more": "input"}}
        first = await run_now(
            client, owner, wf, (await execute(client, owner, wf, body)).json()["run_id"]
        )
        before = await balance(client, owner)
        second_id = (await execute(client, owner, wf, body)).json()["run_id"]
        second = await run_now(client, owner, wf, second_id)
        assert second["status"] == "completed" and second["credits_used"] == 0
        assert [nr["cached"] for nr in second["node_runs"]] == [True, True, True]
        assert [nr["artifact_id"] for nr in second["node_runs"]] == [
            nr["artifact_id"] for nr in first["node_runs"]
        ]
        assert await balance(client, owner) == before
        assert await ledger_of(app, second_id) == [("", "hold", 2), ("", "release", 2)]

    async def test_text_outputs_are_kept_in_the_database_not_in_files(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, chain_graph())
        run_id = (await execute(client, owner, wf, {"input": {"text": "t", "more": "m"}})).json()[
            "run_id"
        ]
        run = await run_now(client, owner, wf, run_id)
        for nr in run["node_runs"]:
            r = await client.get(f"/api/v1/artifacts/{nr['artifact_id']}", headers=owner.headers)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        root = app.state.ctx.settings.artifacts_dir
        assert [p for p in root.rglob("*") if p.is_file()] == []

    async def test_twin_nodes_each_reuse_the_stored_output(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # Two nodes with one cache key (same type, params and input): each is its own hit.
        graph = g(
            [n("in", "TextInput"), n("a", "TextTemplate"), n("b", "TextTemplate")],
            [e("in", "a"), e("in", "b")],
        )
        wf = await create_workflow(client, owner, graph)
        await execute(client, owner, wf, {"input": {"text": "twins"}})
        run_id = (await execute(client, owner, wf, {"input": {"text": "twins"}})).json()["run_id"]
        run = await run_now(client, owner, wf, run_id)
        assert [(nr["node_id"], nr["cached"]) for nr in run["node_runs"]] == [
            ("in", True),
            ("a", True),
            ("b", True),
        ]
        assert run["node_runs"][1]["artifact_id"] == run["node_runs"][2]["artifact_id"]

    async def test_a_failing_node_fails_the_run_at_once(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        graph = g(
            [n("in", "TextInput", key="missing"), n("a", "TextTemplate", template="{{ text }}")],
            [e("in", "a")],
        )
        wf = await create_workflow(client, owner, graph)
        before = await balance(client, owner)
        run_id = (await execute(client, owner, wf, {"input": {"other": 1}})).json()["run_id"]
        run = await run_now(client, owner, wf, run_id)
        assert run["status"] == "failed"
        assert run["error"]["node_id"] == "in" and run["credits_used"] == 0
        assert [nr["status"] for nr in run["node_runs"]] == ["failed", "skipped"]
        assert await balance(client, owner) == before
        types = [ev["type"] for ev in await events_of(client, owner, wf, run_id)]
        assert types == ["run.started", "node.started", "node.failed", "node.skipped", "run.failed"]
        assert await ledger_of(app, run_id) == [("", "hold", 1), ("", "release", 1)]

    async def test_concurrent_runs_never_overspend(
        self, client: httpx.AsyncClient, other: User, app: FastAPI
    ) -> None:
        # 100 credits and runs of 7 credits that all finish while accepted: 14 fit.
        nodes = [n("in", "TextInput")] + [
            n(f"t{i}", "TextTemplate", template=f"{i}{{{{ text }}}}") for i in range(7)
        ]
        wf = await create_workflow(client, other, g(nodes, [e("in", f"t{i}") for i in range(7)]))
        answers = await asyncio.gather(
            *[execute(client, other, wf, {"cache": False}) for _ in range(30)]
        )
        assert sorted(a.status_code for a in answers) == [202] * 14 + [402] * 16
        for a in answers:
            if a.status_code == 202:
                run = await run_now(client, other, wf, a.json()["run_id"])
                assert run["status"] == "completed" and run["credits_used"] == 7
        assert await balance(client, other) == 100 - 14 * 7
        assert await app.state.ctx.db.read(lambda c: ledger_balance(c, other.id)) == 2

    async def test_a_webhook_trigger_runs_at_once_too(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, chain_graph())
        hook = await client.post(
            f"/api/v1/workflows/{wf}/webhooks",
            json={"name": "h", "active": True},
            headers=owner.headers,
        )
        r = await client.post(
            f"/api/v1/webhooks/{hook.json()['token']}", json={"text": "hook", "more": "body"}
        )
        assert r.status_code == 202
        run = await run_now(client, owner, wf, r.json()["run_id"])
        assert run["status"] == "completed" and run["input"] == {"text": "hook", "more": "body"}

    async def test_a_trigger_short_of_credits_is_refused_and_writes_nothing(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        # The chain costs 2 credits; 1 is left. On PostgreSQL the one statement that would
        # have written the run writes nothing, and the refusal is the transaction's own.
        ctx = app.state.ctx
        wf = await create_workflow(client, owner, chain_graph())
        hook = await client.post(
            f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}, headers=owner.headers
        )
        await ctx.db.write(lambda c: accounts.set_credits(c, owner.id, 1))
        r = await client.post(f"/api/v1/webhooks/{hook.json()['token']}", json={"text": "t"})
        assert r.status_code == 402, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert (r.json()["required"], r.json()["available"]) == (2, 1)
        runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        assert runs.json() == []
        assert await balance(client, owner) == 1
        assert await ctx.db.read(lambda c: ledger_balance(c, owner.id)) == 1

    @pytest.mark.parametrize("backend", ["postgres"])
    async def test_a_webhook_trigger_is_one_statement_on_postgres(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        """Accepting, executing and finishing the run is one statement of its own: no BEGIN,
        no look-up, no COMMIT (transitions.created_alone)."""
        wf = await create_workflow(client, owner, chain_graph())
        hook = await client.post(
            f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}, headers=owner.headers
        )
        url = f"/api/v1/webhooks/{hook.json()['token']}"
        first = await client.post(url, json={"text": "0", "more": "m"})  # reads the webhook
        assert first.status_code == 202
        db = app.state.ctx.db
        ids = []
        # The triggers' own statements: a background loop's (an API key's last use, a
        # schedule tick) are not theirs to count.
        with db.counting() as sent:
            for i in range(1, 6):
                r = await client.post(url, json={"text": str(i), "more": "m"})
                assert r.status_code == 202, r.text
                ids.append(r.json()["run_id"])
        assert sent.n == 5
        for i, run_id in enumerate(ids, start=1):
            run = await run_now(client, owner, wf, run_id)
            assert run["status"] == "completed" and run["credits_used"] == 2
            art = run["node_runs"][-1]["artifact_id"]
            download = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
            assert download.text == f"<{i}> and m"
            assert shape(await events_of(client, owner, wf, run_id)) == EXPECTED_EVENTS
            assert await ledger_of(app, run_id) == [
                ("", "hold", 2), ("a", "charge", 1), ("b", "charge", 1),
            ]  # fmt: skip
        # The same body again: its outputs are stored, so the statement writes nothing and
        # the transaction reuses them, free.
        again = await client.post(url, json={"text": "1", "more": "m"})
        run = await run_now(client, owner, wf, again.json()["run_id"])
        assert run["credits_used"] == 0 and all(nr["cached"] for nr in run["node_runs"][1:])
        assert await db.read(lambda c: ledger_balance(c, owner.id)) == await balance(client, owner)

    @pytest.mark.parametrize("backend", ["postgres"])
    async def test_a_cache_hit_trigger_is_no_more_statements_than_a_miss_on_postgres(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        """A trigger whose outputs are stored is answered by them, free, in as few
        statements as one whose outputs are not (ADR 0029): the one statement, checking
        that each reused output is still the account's newest of its key."""
        wf = await create_workflow(client, owner, chain_graph())
        hook = await client.post(
            f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}, headers=owner.headers
        )
        url = f"/api/v1/webhooks/{hook.json()['token']}"
        assert (await client.post(url, json={"text": "0", "more": "m"})).status_code == 202
        db = app.state.ctx.db
        missed, hit = [], []  # a webhook takes 10 triggers a minute: 1 + 4 + 4
        with db.counting() as misses:
            for i in range(1, 5):
                r = await client.post(url, json={"text": str(i), "more": "m"})
                assert r.status_code == 202, r.text
                missed.append(r.json()["run_id"])
        with db.counting() as hits:
            for i in range(1, 5):
                r = await client.post(url, json={"text": str(i), "more": "m"})
                assert r.status_code == 202, r.text
                hit.append(r.json()["run_id"])
        assert misses.n == 4
        assert hits.n <= misses.n
        for i, (miss_id, hit_id) in enumerate(zip(missed, hit, strict=True), start=1):
            miss = await run_now(client, owner, wf, miss_id)
            run = await run_now(client, owner, wf, hit_id)
            assert run["status"] == "completed" and run["credits_used"] == 0
            assert [nr["cached"] for nr in run["node_runs"]] == [True, True, True]
            assert [nr["credits_used"] for nr in run["node_runs"]] == [0, 0, 0]
            # The same artifacts, not copies.
            reused = [nr["artifact_id"] for nr in run["node_runs"]]
            assert reused == [nr["artifact_id"] for nr in miss["node_runs"]]
            download = await client.get(f"/api/v1/artifacts/{reused[-1]}", headers=owner.headers)
            assert download.text == f"<{i}> and m"
            events = await events_of(client, owner, wf, hit_id)
            assert shape(events) == EXPECTED_EVENTS
            completed = [ev for ev in events if ev["type"] == "node.completed"]
            assert [ev["data"].get("cached") for ev in completed] == [True, True, True]
            assert await ledger_of(app, hit_id) == [("", "hold", 2), ("", "release", 2)]
        assert await db.read(lambda c: ledger_balance(c, owner.id)) == await balance(client, owner)

    async def test_a_cache_hit_reuses_the_newest_output_and_never_a_gone_one(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        """What the accepting process knows stored is checked, never trusted: a newer
        output of the same key is the one reused, and an output no longer stored is made
        again (and charged)."""
        db = app.state.ctx.db
        wf = await create_workflow(client, owner, chain_graph())
        body = {"input": {"text": "k", "more": "m"}}
        first = await run_now(
            client, owner, wf, (await execute(client, owner, wf, body)).json()["run_id"]
        )
        # A run with the cache off makes newer artifacts of the same keys.
        off = (await execute(client, owner, wf, {**body, "cache": False})).json()["run_id"]
        newer = await run_now(client, owner, wf, off)
        assert newer["credits_used"] == 2
        again = (await execute(client, owner, wf, body)).json()["run_id"]
        run = await run_now(client, owner, wf, again)
        assert run["credits_used"] == 0
        reused = [nr["artifact_id"] for nr in run["node_runs"]]
        assert reused == [nr["artifact_id"] for nr in newer["node_runs"]]
        assert reused != [nr["artifact_id"] for nr in first["node_runs"]]
        # The outputs are no longer stored under their keys (as retention leaves them).
        await db.write(
            lambda c: c.execute(
                sa.text("update artifacts set cache_key = null where account_id = :a"),
                {"a": owner.id},
            )
        )
        made = (await execute(client, owner, wf, body)).json()["run_id"]
        run = await run_now(client, owner, wf, made)
        assert run["status"] == "completed" and run["credits_used"] == 2
        assert not any(nr["cached"] for nr in run["node_runs"])
        art = run["node_runs"][-1]["artifact_id"]
        download = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
        assert download.text == "<k> and m"
        assert await ledger_of(app, made) == [
            ("", "hold", 2),
            ("a", "charge", 1),
            ("b", "charge", 1),
        ]
        assert await db.read(lambda c: ledger_balance(c, owner.id)) == await balance(client, owner)

    async def test_a_run_of_an_edited_workflow_runs_the_new_graph(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, chain_graph())
        await execute(client, owner, wf, {"input": {"text": "1", "more": "m"}})
        edited = chain_graph()
        edited["nodes"][2]["data"]["template"] = "edited {{ text }}"
        r = await client.patch(
            f"/api/v1/workflows/{wf}", json={"graph_json": edited}, headers=owner.headers
        )
        assert r.status_code == 200
        run_id = (await execute(client, owner, wf, {"input": {"text": "2", "more": "m"}})).json()[
            "run_id"
        ]
        run = await run_now(client, owner, wf, run_id)
        art = run["node_runs"][-1]["artifact_id"]
        download = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
        assert download.text == "edited <2>"


class TestWorkflowChangedWhileAccepting:
    """Reading the workflow and writing its run are two transactions: a run is never made
    of a version that was replaced (or a workflow deleted) in between."""

    async def test_a_stale_version_is_not_written(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        ctx = app.state.ctx
        wf = await create_workflow(client, owner, chain_graph())
        request = RunRequest(owner.id, wf, {"text": "t", "more": "m"}, True, "business")
        old = await ctx.db.read(lambda c: read_workflow(c, owner.id, wf, ctx.graphs))
        edited = chain_graph()
        edited["nodes"][2]["data"]["template"] = "new {{ text }}"
        r = await client.patch(
            f"/api/v1/workflows/{wf}", json={"graph_json": edited}, headers=owner.headers
        )
        assert r.status_code == 200
        state, batch = new_run(request, old)
        answer = {"run_id": batch.run_id}
        with pytest.raises(WorkflowChanged):
            await ctx.db.write(lambda c: write_run(c, request, state, batch, answer))
        runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        assert runs.json() == []

        # Accepting with the stale version in hand reads the workflow again and runs the new one.
        accepted = await ctx.acceptor.accept(
            dataclasses.replace(request, workflow_version=old.updated_at)
        )
        run = await run_now(client, owner, wf, accepted.answer["run_id"])
        art = run["node_runs"][-1]["artifact_id"]
        download = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
        assert download.text == "new <t>"

    async def test_a_deleted_workflow_is_not_run(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        ctx = app.state.ctx
        wf = await create_workflow(client, owner, chain_graph())
        request = RunRequest(owner.id, wf, None, True, "business")
        old = await ctx.db.read(lambda c: read_workflow(c, owner.id, wf, ctx.graphs))
        assert (await client.delete(f"/api/v1/workflows/{wf}", headers=owner.headers)).status_code
        with pytest.raises(NotFound):
            await ctx.acceptor.accept(dataclasses.replace(request, workflow_version=old.updated_at))
