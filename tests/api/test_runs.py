"""Execute and run status: running workflows end to end."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.engine.credits import ledger_balance
from tests.api.test_auth import assert_problem
from tests.conftest import User, text_graph
from tests.runs_helpers import (
    balance,
    create_workflow,
    e,
    execute,
    g,
    n,
    wait_for_node,
    wait_for_run,
)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


class TestExecute:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        """In-process driving (SQLite) and queue workers (PostgreSQL) alike."""
        return str(request.param)

    async def test_runs_to_completion_and_charges_exactly(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        before = await balance(client, owner)
        r = await execute(client, owner, wf)
        assert r.status_code == 202
        body = r.json()
        assert body["status"] == "running" and body["estimated_credits"] == 1
        assert set(body) == {"run_id", "status", "estimated_credits"}
        assert r.headers["location"] == f"/api/v1/workflows/{wf}/runs/{body['run_id']}"
        run = await wait_for_run(client, owner, wf, body["run_id"])
        assert run["status"] == "completed" and run["error"] is None
        assert run["credits_used"] == 1 and run["estimated_credits"] == 1
        assert run["duration_ms"] >= 0 and run["finished_at"] is not None
        assert [nr["node_id"] for nr in run["node_runs"]] == ["in", "tpl"]
        assert all(nr["status"] == "completed" and nr["artifact_id"] for nr in run["node_runs"])
        assert await balance(client, owner) == before - 1
        art = run["node_runs"][1]["artifact_id"]
        r = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
        assert r.status_code == 200 and r.text == "Hello world!"
        assert r.headers["content-type"].startswith("text/plain")

    async def test_run_has_every_field(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, text_graph())
        run_id = (await execute(client, owner, wf, {"input": {"text": "there"}})).json()["run_id"]
        run = await wait_for_run(client, owner, wf, run_id)
        assert set(run) == {
            "id",
            "workflow_id",
            "status",
            "credits_used",
            "estimated_credits",
            "duration_ms",
            "created_at",
            "finished_at",
            "error",
            "input",
            "node_runs",
            "trigger",
            "webhook_id",
            "workflow_version",
            "retried_from",
            "parent_run_id",
            "parent_node_id",
            "parent_workflow_id",
            "retries",
        }
        assert run["input"] == {"text": "there"} and run["workflow_id"] == wf
        assert run["retried_from"] is None and run["retries"] == []
        assert run["parent_run_id"] is None and run["parent_node_id"] is None
        assert set(run["node_runs"][0]) == {
            "node_id",
            "item_index",  # null but for a batch's items (docs/batches.md)
            "item_count",  # the same
            "type",
            "status",
            "artifact_id",
            "credits_used",
            "cached",
            "started_at",
            "finished_at",
            "duration_ms",
            "error",
            "child_run_id",
            "child_workflow_id",
            "server",  # a ComfyUI fleet's server, null for every other node
        }
        assert run["node_runs"][0]["item_index"] is None
        assert run["node_runs"][0]["server"] is None

    @pytest.mark.parametrize(
        ("data", "body", "expected"),
        [
            ({"text": "fallback"}, None, "fallback"),
            ({"text": "fallback"}, {"input": {}}, "fallback"),
            ({}, {"input": {"text": "from input"}}, "from input"),
            ({"key": "who"}, {"input": {"who": "keyed", "text": "not this"}}, "keyed"),
            ({"key": "n"}, {"input": {"n": 42}}, "42"),
            ({}, {"input": {"a": 1, "b": "é"}}, '{"a": 1, "b": "é"}'),
        ],
    )
    async def test_input_reaches_text_input(
        self,
        client: httpx.AsyncClient,
        owner: User,
        data: dict[str, object],
        body: object,
        expected: str,
    ) -> None:
        wf = await create_workflow(client, owner, g([n("in", "TextInput", **data)], []))
        run_id = (await execute(client, owner, wf, body)).json()["run_id"]
        run = await wait_for_run(client, owner, wf, run_id)
        r = await client.get(
            f"/api/v1/artifacts/{run['node_runs'][0]['artifact_id']}", headers=owner.headers
        )
        assert r.text == expected

    async def test_template_sees_input(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, text_graph("{{ text }} / {{ input.category }}"))
        run_id = (
            await execute(client, owner, wf, {"input": {"text": "hi", "category": "news"}})
        ).json()["run_id"]
        run = await wait_for_run(client, owner, wf, run_id)
        r = await client.get(
            f"/api/v1/artifacts/{run['node_runs'][1]['artifact_id']}", headers=owner.headers
        )
        assert r.text == "hi / news"

    async def test_unknown_workflow_is_404(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await execute(client, owner, "00000000-0000-0000-0000-000000000000")
        assert_problem(r, 404, "not_found")

    async def test_another_accounts_workflow_is_404(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        assert_problem(await execute(client, other, wf), 404, "not_found")

    @pytest.mark.parametrize(
        "body", [{"input": "text"}, {"input": [1]}, {"cache": "sometimes"}, [1, 2]]
    )
    async def test_bad_bodies_are_400(
        self, client: httpx.AsyncClient, owner: User, body: object
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        assert_problem(await execute(client, owner, wf, body), 400, "invalid_request")

    async def test_insufficient_credits_is_402_and_creates_nothing(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        # "other" signed up with 100 credits; a workflow of 101 templates costs 101.
        nodes = [n("in", "TextInput")] + [n(f"t{i}", "TextTemplate") for i in range(101)]
        edges = [e("in", f"t{i}") for i in range(101)]
        wf = await create_workflow(client, other, g(nodes, edges))
        r = await execute(client, other, wf)
        problem = assert_problem(r, 402, "insufficient_credits")
        assert problem["required"] == 101 and problem["available"] == 100
        assert "101" in str(problem["detail"]) and "100" in str(problem["detail"])
        runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=other.headers)
        assert runs.json() == []
        assert await balance(client, other) == 100


class TestScheduling:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        """In-process driving (SQLite) and queue workers (PostgreSQL) alike."""
        return str(request.param)

    async def test_independent_branches_run_concurrently(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput", text="x"),
                n("d1", "Delay", seconds=1),
                n("d2", "Delay", seconds=1),
                n("join", "TextTemplate", template="{{ text }}"),
            ],
            [e("in", "d1"), e("in", "d2"), e("d1", "join")],
        )
        wf = await create_workflow(client, owner, graph)
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        run = await wait_for_run(client, owner, wf, run_id)
        assert run["status"] == "completed"
        # Concurrent: each Delay started before the other finished (the run's own record,
        # not a wall-clock bound that a loaded machine could break).
        nodes = {nr["node_id"]: nr for nr in run["node_runs"]}
        d1, d2 = nodes["d1"], nodes["d2"]
        assert d1["started_at"] < d2["finished_at"] and d2["started_at"] < d1["finished_at"]

    async def test_duration_grows_while_running(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(
            client, owner, g([n("in", "TextInput"), n("d", "Delay", seconds=1)], [e("in", "d")])
        )
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        url = f"/api/v1/workflows/{wf}/runs/{run_id}"
        # On PostgreSQL the Delay node waits for a queue worker first: sample once it runs.
        for _ in range(100):
            first = (await client.get(url, headers=owner.headers)).json()
            if {nr["node_id"]: nr["status"] for nr in first["node_runs"]}["d"] == "running":
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        second = (await client.get(url, headers=owner.headers)).json()
        assert first["status"] == second["status"] == "running"
        assert second["duration_ms"] >= first["duration_ms"] + 250
        assert second["finished_at"] is None
        statuses = {nr["node_id"]: nr["status"] for nr in second["node_runs"]}
        assert statuses == {"in": "completed", "d": "running"}
        await wait_for_run(client, owner, wf, run_id)

    async def test_failure_skips_descendants_and_other_branch_finishes(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput", text="x"),
                n("bad", "TextTemplate", template="{{ 1 / 0 }}"),
                n("after", "TextTemplate"),
                n("after2", "Delay", seconds=0),
                n("good", "TextTemplate", template="ok {{ text }}"),
            ],
            [e("in", "bad"), e("bad", "after"), e("after", "after2"), e("in", "good")],
        )
        wf = await create_workflow(client, owner, graph)
        before = await balance(client, owner)
        r = await execute(client, owner, wf)
        assert r.json()["estimated_credits"] == 3
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        status = {nr["node_id"]: nr for nr in run["node_runs"]}
        assert run["status"] == "failed"
        assert run["error"]["node_id"] == "bad" and "template error" in run["error"]["message"]
        assert status["bad"]["status"] == "failed" and status["bad"]["error"]["message"]
        assert status["after"]["status"] == "skipped" and status["after2"]["status"] == "skipped"
        assert status["good"]["status"] == "completed"
        assert status["bad"]["credits_used"] == 0 and status["after"]["credits_used"] == 0
        assert run["credits_used"] == 1
        assert await balance(client, owner) == before - 1


class TestCancel:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        """In-process driving (SQLite) and queue workers (PostgreSQL) alike."""
        return str(request.param)

    async def test_cancel_running_run(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [n("in", "TextInput"), n("d", "Delay", seconds=30), n("t", "TextTemplate")],
            [e("in", "d"), e("d", "t")],
        )
        wf = await create_workflow(client, owner, graph)
        before = await balance(client, owner)
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        await wait_for_node(client, owner, wf, run_id, "d")
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202
        run = await wait_for_run(client, owner, wf, run_id, timeout=5)
        assert run["status"] == "cancelled" and run["error"]["code"] == "cancelled"
        status = {nr["node_id"]: nr["status"] for nr in run["node_runs"]}
        assert status == {"in": "completed", "d": "cancelled", "t": "cancelled"}
        assert await balance(client, owner) == before
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert_problem(r, 409, "conflict")

    async def test_cancel_unknown_or_foreign_run_is_404(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=other.headers)
        assert_problem(r, 404, "not_found")
        r = await client.post(
            f"/api/v1/workflows/{wf}/runs/00000000-0000-0000-0000-000000000000/cancel",
            headers=owner.headers,
        )
        assert_problem(r, 404, "not_found")

    async def test_deleting_the_workflow_cancels_its_runs(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(
            client, owner, g([n("in", "TextInput"), n("d", "Delay", seconds=30)], [e("in", "d")])
        )
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        await wait_for_node(client, owner, wf, run_id, "d")
        assert (
            await client.delete(f"/api/v1/workflows/{wf}", headers=owner.headers)
        ).status_code == 204
        db = app.state.ctx.db
        deadline = time.monotonic() + 5
        while True:
            status = await db.read(
                lambda c: c.execute(
                    sa.text("select status from runs where id = :r"), {"r": run_id}
                ).scalar()
            )
            if status != "running" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert status == "cancelled"


class TestIdempotency:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_same_key_replays_and_starts_nothing(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        before = await balance(client, owner)
        first = await execute(client, owner, wf, headers={"Idempotency-Key": "abc-1"})
        second = await execute(client, owner, wf, headers={"Idempotency-Key": "abc-1"})
        assert first.status_code == second.status_code == 202
        assert first.json() == second.json()
        assert second.headers["location"] == first.headers["location"]
        await wait_for_run(client, owner, wf, first.json()["run_id"])
        runs = (await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)).json()
        assert len(runs) == 1
        assert await balance(client, owner) == before - 1
        third = await execute(client, owner, wf, headers={"Idempotency-Key": "abc-2"})
        assert third.json()["run_id"] != first.json()["run_id"]

    async def test_a_key_over_255_characters_is_400_and_starts_nothing(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        r = await execute(client, owner, wf, headers={"Idempotency-Key": "k" * 256})
        assert_problem(r, 400, "invalid_request")
        assert "idempotency-key" in r.text.lower()
        runs = (await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)).json()
        assert runs == []
        ok = await execute(client, owner, wf, headers={"Idempotency-Key": "k" * 255})
        assert ok.status_code == 202

    async def test_same_key_on_another_workflow_is_refused(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        first = await create_workflow(client, owner, text_graph())
        second = await create_workflow(client, owner, text_graph("other {{ text }}"))
        r = await execute(client, owner, first, headers={"Idempotency-Key": "k-1"})
        assert r.status_code == 202
        r = await execute(client, owner, second, headers={"Idempotency-Key": "k-1"})
        assert_problem(r, 422, "idempotency_key_reused")
        assert (
            await client.get(f"/api/v1/workflows/{second}/runs", headers=owner.headers)
        ).json() == []

    async def test_same_key_with_another_body_is_refused(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        key = {"Idempotency-Key": "k-2"}
        r = await execute(client, owner, wf, {"input": {"text": "a"}}, headers=key)
        assert r.status_code == 202
        for body in ({"input": {"text": "b"}}, {"input": {"text": "a"}, "cache": False}, None):
            r = await execute(client, owner, wf, body, headers=key)
            assert_problem(r, 422, "idempotency_key_reused")
        again = await execute(client, owner, wf, {"input": {"text": "a"}}, headers=key)
        assert again.status_code == 202
        assert again.headers["idempotent-replayed"] == "true"
        runs = (await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)).json()
        assert len(runs) == 1

    async def test_concurrent_same_key_creates_one_run(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        answers = await asyncio.gather(
            *[execute(client, owner, wf, headers={"Idempotency-Key": "race"}) for _ in range(8)]
        )
        assert len({a.json()["run_id"] for a in answers}) == 1


class TestCredits:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_concurrent_executes_never_overspend(
        self, client: httpx.AsyncClient, owner: User, other: User, app: FastAPI
    ) -> None:
        # 100 credits, each run costs 7: at most 14 may start.
        nodes = [n("in", "TextInput")] + [
            n(f"t{i}", "TextTemplate", template=f"{i}{{{{ text }}}}") for i in range(7)
        ]
        wf = await create_workflow(client, other, g(nodes, [e("in", f"t{i}") for i in range(7)]))
        answers = await asyncio.gather(
            *[execute(client, other, wf, {"cache": False}) for _ in range(30)]
        )
        accepted = [a for a in answers if a.status_code == 202]
        refused = [a for a in answers if a.status_code == 402]
        assert len(accepted) == 14 and len(refused) == 16
        for a in accepted:
            await wait_for_run(client, other, wf, a.json()["run_id"])
        assert await balance(client, other) == 100 - 14 * 7
        assert await app.state.ctx.db.read(lambda c: ledger_balance(c, other.id)) == 100 - 14 * 7

    async def test_ledger_always_matches_balance(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("bad", "TextTemplate", template="{{ 1/0 }}"),
                n("ok", "TextTemplate"),
            ],
            [e("in", "bad"), e("in", "ok")],
        )
        wf = await create_workflow(client, owner, graph)
        for i in range(5):
            run_id = (await execute(client, owner, wf, {"input": {"text": str(i)}})).json()[
                "run_id"
            ]
            await wait_for_run(client, owner, wf, run_id)
        ledger = await app.state.ctx.db.read(lambda c: ledger_balance(c, owner.id))
        assert ledger == await balance(client, owner)
        rows = await app.state.ctx.db.read(
            lambda c: c.execute(
                sa.text("select run_id, kind, amount from credit_ledger where run_id != ''")
            ).all()
        )
        per_run: dict[str, dict[str, int]] = {}
        for run_id, kind, amount in rows:
            per_run.setdefault(run_id, {}).setdefault(kind, 0)
            per_run[run_id][kind] += amount
        for kinds in per_run.values():
            assert kinds["hold"] == kinds.get("charge", 0) + kinds.get("release", 0)


class TestCache:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        """In-process driving (SQLite) and queue workers (PostgreSQL) alike."""
        return str(request.param)

    async def test_identical_node_reuses_artifact_for_free(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        first = await wait_for_run(
            client, owner, wf, (await execute(client, owner, wf)).json()["run_id"]
        )
        before = await balance(client, owner)
        second = await wait_for_run(
            client, owner, wf, (await execute(client, owner, wf)).json()["run_id"]
        )
        assert second["status"] == "completed"
        assert [nr["cached"] for nr in second["node_runs"]] == [True, True]
        assert second["credits_used"] == 0 and await balance(client, owner) == before
        assert [nr["artifact_id"] for nr in second["node_runs"]] == [
            nr["artifact_id"] for nr in first["node_runs"]
        ]
        # Different input: no hit.
        third = await wait_for_run(
            client,
            owner,
            wf,
            (await execute(client, owner, wf, {"input": {"text": "new"}})).json()["run_id"],
        )
        assert [nr["cached"] for nr in third["node_runs"]] == [False, False]

    async def test_cache_false_runs_everything(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        await wait_for_run(client, owner, wf, (await execute(client, owner, wf)).json()["run_id"])
        run = await wait_for_run(
            client, owner, wf, (await execute(client, owner, wf, {"cache": False})).json()["run_id"]
        )
        assert [nr["cached"] for nr in run["node_runs"]] == [False, False]
        assert run["credits_used"] == 1

    async def test_outputs_of_runs_without_the_cache_are_reused_later(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        earlier = set()
        for _ in range(3):  # the same outputs stored three times over
            r = await execute(client, owner, wf, {"input": {"text": "x"}, "cache": False})
            run = await wait_for_run(client, owner, wf, r.json()["run_id"])
            earlier.update(nr["artifact_id"] for nr in run["node_runs"])
        assert len(earlier) == 6
        r = await execute(client, owner, wf, {"input": {"text": "x"}})
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert [nr["cached"] for nr in run["node_runs"]] == [True, True]
        assert {nr["artifact_id"] for nr in run["node_runs"]} <= earlier
        assert run["credits_used"] == 0

    async def test_cache_is_per_account(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        for user in (owner, other):
            wf = await create_workflow(client, user, text_graph())
            run = await wait_for_run(
                client, user, wf, (await execute(client, user, wf)).json()["run_id"]
            )
            assert [nr["cached"] for nr in run["node_runs"]] == [False, False]


class TestRunList:
    async def test_list_paging_status_filter_and_scoping(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(
            client,
            owner,
            g(
                [n("in", "TextInput"), n("bad", "TextTemplate", template="{{ 1/0 }}")],
                [e("in", "bad")],
            ),
        )
        ids = []
        for i in range(3):
            run_id = (await execute(client, owner, wf, {"input": {"text": str(i)}})).json()[
                "run_id"
            ]
            ids.append(run_id)
            await wait_for_run(client, owner, wf, run_id)
        r = await client.get(f"/api/v1/workflows/{wf}/runs?limit=2", headers=owner.headers)
        assert [x["id"] for x in r.json()] == ids[::-1][:2]
        assert 'rel="next"' in r.headers["link"]
        r = await client.get(f"/api/v1/workflows/{wf}/runs?status=failed", headers=owner.headers)
        assert len(r.json()) == 3
        r = await client.get(f"/api/v1/workflows/{wf}/runs?status=completed", headers=owner.headers)
        assert r.json() == []
        assert_problem(
            await client.get(f"/api/v1/workflows/{wf}/runs?status=done", headers=owner.headers),
            400,
            "invalid_request",
        )
        assert_problem(
            await client.get(f"/api/v1/workflows/{wf}/runs", headers=other.headers),
            404,
            "not_found",
        )
        assert_problem(
            await client.get(f"/api/v1/workflows/{wf}/runs/{ids[0]}", headers=other.headers),
            404,
            "not_found",
        )
