"""The API additions the web app uses: set-up status, run triggers, the account-wide run list,
the estimate before a run, the credit ledger and each workflow's last run. On both databases."""

from __future__ import annotations

import httpx
import pytest

from tests.api.test_auth import assert_problem
from tests.conftest import PASSWORD, User, text_graph
from tests.runs_helpers import create_workflow, execute, wait_for_run


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestSetupStatus:
    async def test_says_setup_is_needed_until_the_owner_exists(
        self, client: httpx.AsyncClient
    ) -> None:
        r = await client.get("/api/v1/auth/setup")
        assert r.status_code == 200
        assert r.json() == {"setup_required": True, "signup_enabled": True}
        r = await client.post(
            "/api/v1/auth/signup", json={"email": "o@example.com", "password": PASSWORD}
        )
        assert r.status_code == 201
        # Sign-up is off by default once the owner exists.
        assert (await client.get("/api/v1/auth/setup")).json() == {
            "setup_required": False,
            "signup_enabled": False,
        }


class TestRunTriggers:
    async def test_execute_records_api_or_editor(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        api_run = (await execute(client, owner, wf)).json()["run_id"]
        editor_run = (await execute(client, owner, wf, {"trigger": "editor"})).json()["run_id"]
        assert (await wait_for_run(client, owner, wf, api_run))["trigger"] == "api"
        editor = await wait_for_run(client, owner, wf, editor_run)
        assert editor["trigger"] == "editor" and editor["webhook_id"] is None
        r = await client.get(f"/api/v1/workflows/{wf}/runs?trigger=editor", headers=owner.headers)
        assert [run["id"] for run in r.json()] == [editor_run]

    async def test_a_webhook_run_says_webhook(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, text_graph())
        hook = await client.post(
            f"/api/v1/workflows/{wf}/webhooks",
            json={"name": "h", "active": True},
            headers=owner.headers,
        )
        r = await client.post(hook.json()["url"].removeprefix("http://testserver"), json={})
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["trigger"] == "webhook" and run["webhook_id"] == hook.json()["id"]

    async def test_unknown_trigger_is_refused(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, text_graph())
        assert_problem(
            await execute(client, owner, wf, {"trigger": "webhook"}), 400, "invalid_request"
        )


class TestAllRuns:
    async def test_lists_every_workflow_newest_first_with_names(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        first = await create_workflow(client, owner, text_graph(), name="first")
        second = await create_workflow(client, owner, text_graph(), name="second")
        ids = []
        for wf in (first, second, first):
            run_id = (await execute(client, owner, wf)).json()["run_id"]
            await wait_for_run(client, owner, wf, run_id)
            ids.append(run_id)
        theirs = await create_workflow(client, other, text_graph())
        await execute(client, other, theirs)

        r = await client.get("/api/v1/runs", headers=owner.headers)
        assert r.status_code == 200
        body = r.json()
        assert [run["id"] for run in body] == ids[::-1]
        assert [run["workflow_name"] for run in body] == ["first", "second", "first"]
        assert all(run["status"] == "completed" and run["trigger"] == "api" for run in body)

        page = await client.get("/api/v1/runs?limit=2", headers=owner.headers)
        assert [run["id"] for run in page.json()] == ids[:0:-1]
        rest = page.links["next"]["url"].removeprefix("http://testserver")
        assert [run["id"] for run in (await client.get(rest, headers=owner.headers)).json()] == [
            ids[0]
        ]

        # Runs of a deleted workflow leave the list with it.
        await client.delete(f"/api/v1/workflows/{second}", headers=owner.headers)
        r = await client.get("/api/v1/runs", headers=owner.headers)
        assert [run["id"] for run in r.json()] == [ids[2], ids[0]]

    async def test_needs_credentials(self, client: httpx.AsyncClient) -> None:
        assert_problem(await client.get("/api/v1/runs"), 401, "unauthorized")


class TestEstimate:
    async def test_estimate_and_balance_before_running(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        r = await client.get(f"/api/v1/workflows/{wf}/estimate", headers=owner.headers)
        assert r.status_code == 200
        me = (await client.get("/api/v1/me", headers=owner.headers)).json()
        body = r.json()
        assert body["estimated_credits"] == 1 and body["credits_balance"] == me["credits_balance"]
        assert body["sufficient"] is True and body["workflow_version"] == 1
        assert [(x["node_id"], x["credits"]) for x in body["nodes"]] == [("in", 0), ("tpl", 1)]
        started = (await execute(client, owner, wf)).json()
        assert started["estimated_credits"] == r.json()["estimated_credits"]
        # Another account's workflow does not exist for this one.
        theirs = await client.get(f"/api/v1/workflows/{wf}/estimate", headers=other.headers)
        assert_problem(theirs, 404, "not_found")


class TestLedger:
    async def test_entries_newest_first_with_their_effect(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        await wait_for_run(client, owner, wf, run_id)
        r = await client.get("/api/v1/me/ledger", headers=owner.jwt_headers)
        assert r.status_code == 200
        entries = r.json()
        kinds = [entry["kind"] for entry in entries]
        assert kinds[-1] == "grant" and kinds[-2] == "hold" and "charge" in kinds
        hold = entries[-2]
        assert hold["run_id"] == run_id and hold["balance_change"] == -hold["amount"]
        assert entries[-1]["run_id"] is None and entries[-1]["note"] == "initial credits"
        me = (await client.get("/api/v1/me", headers=owner.headers)).json()
        assert sum(entry["balance_change"] for entry in entries) == me["credits_balance"]

        page = await client.get("/api/v1/me/ledger?limit=1", headers=owner.headers)
        assert [entry["id"] for entry in page.json()] == [entries[0]["id"]]
        rest = page.links["next"]["url"].removeprefix("http://testserver")
        following = (await client.get(rest, headers=owner.headers)).json()
        assert [entry["id"] for entry in following] == [entries[1]["id"]]  # limit is kept

        theirs = (await client.get("/api/v1/me/ledger", headers=other.headers)).json()
        assert [entry["kind"] for entry in theirs] == ["grant"]

    async def test_foreign_cursor_is_refused(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.get("/api/v1/me/ledger?cursor=bm9wZQ", headers=owner.headers)
        assert_problem(r, 400, "invalid_request")


class TestLastRun:
    async def test_list_adds_the_newest_run_only_when_asked(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        ran = await create_workflow(client, owner, text_graph(), name="ran")
        idle = await create_workflow(client, owner, text_graph(), name="idle")
        run_id = (await execute(client, owner, ran)).json()["run_id"]
        run = await wait_for_run(client, owner, ran, run_id)
        plain = (await client.get("/api/v1/workflows", headers=owner.headers)).json()
        assert all(set(item) == {"id", "name", "created_at", "node_count"} for item in plain)
        r = await client.get("/api/v1/workflows?with_last_run=true", headers=owner.headers)
        items = {item["id"]: item for item in r.json()}
        assert items[ran]["last_run_status"] == "completed"
        assert items[ran]["last_run_at"] == run["created_at"]
        assert items[idle]["last_run_status"] is None and items[idle]["last_run_at"] is None
