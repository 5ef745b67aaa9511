"""Retry from the failed node: ``POST /workflows/{id}/runs/{run_id}/retry``. A new run,
linked both ways, that reuses every completed node's artifact (uncharged) and runs the
rest; on SQLite (in-process driver) and PostgreSQL (queue workers)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.engine.credits import ledger_balance
from nodeloom.schemas.events import MESSAGE
from tests.api.test_auth import assert_problem
from tests.api.test_instant_runs import events_of, ledger_of
from tests.api.test_webhooks import set_credits
from tests.conftest import User, text_graph
from tests.runs_helpers import (
    FAILS_PART_WAY,
    balance,
    create_workflow,
    e,
    execute,
    g,
    n,
    wait_for_run,
)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """In-process driving (SQLite) and queue workers (PostgreSQL) alike."""
    return str(request.param)


FAILING = FAILS_PART_WAY


def _url(wf: str, run_id: str, action: str = "") -> str:
    return f"/api/v1/workflows/{wf}/runs/{run_id}" + (f"/{action}" if action else "")


async def _retry(
    client: httpx.AsyncClient,
    user: User,
    wf: str,
    run_id: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        _url(wf, run_id, "retry"), json=body, headers={**user.headers, **(headers or {})}
    )


async def _failed_run(client: httpx.AsyncClient, user: User) -> tuple[str, dict[str, Any]]:
    wf = await create_workflow(client, user, FAILING)
    r = await execute(client, user, wf)
    run = await wait_for_run(client, user, wf, r.json()["run_id"])
    assert run["status"] == "failed" and run["error"]["node_id"] == "bad"
    assert run["credits_used"] == 2
    return wf, run


def _nodes(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {nr["node_id"]: nr for nr in run["node_runs"]}


async def _text(client: httpx.AsyncClient, user: User, artifact_id: str) -> str:
    r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=user.headers)
    assert r.status_code == 200
    return r.text


class TestRetry:
    async def test_reuses_completed_nodes_and_charges_only_what_runs_again(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf, first = await _failed_run(client, owner)
        before = await balance(client, owner)
        r = await _retry(client, owner, wf, first["id"], {"params": {"bad": {"template": "B"}}})
        assert r.status_code == 202, r.text
        answer = r.json()
        assert answer["status"] == "running" and answer["retried_from"] == first["id"]
        # Only "bad" and "after" run again: 1 credit each.
        assert answer["estimated_credits"] == 2
        assert r.headers["location"] == _url(wf, answer["run_id"])
        retry = await wait_for_run(client, owner, wf, answer["run_id"])
        assert retry["status"] == "completed", retry
        assert retry["retried_from"] == first["id"] and retry["retries"] == []
        assert retry["input"] == first["input"]
        old, new = _nodes(first), _nodes(retry)
        for reused in ("in", "a", "side"):
            assert new[reused]["status"] == "completed" and new[reused]["cached"] is True
            assert new[reused]["artifact_id"] == old[reused]["artifact_id"]
            assert new[reused]["credits_used"] == 0
        for ran in ("bad", "after"):
            assert new[ran]["status"] == "completed" and new[ran]["cached"] is False
            assert new[ran]["credits_used"] == 1
        assert await _text(client, owner, new["after"]["artifact_id"]) == "B!"
        assert retry["credits_used"] == 2
        assert await balance(client, owner) == before - 2
        assert await ledger_of(app, retry["id"]) == [
            ("", "hold", 2),
            *sorted([("bad", "charge", 1), ("after", "charge", 1)], key=lambda x: x[0] != "bad"),
        ]
        db = app.state.ctx.db
        assert await db.read(lambda c: ledger_balance(c, owner.id)) == await balance(client, owner)
        # The old run lists its retry; it is unchanged otherwise.
        r = await client.get(_url(wf, first["id"]), headers=owner.headers)
        assert r.json()["retries"] == [retry["id"]]
        assert r.json()["status"] == "failed" and r.json()["node_runs"] == first["node_runs"]
        r = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        listed = {item["id"]: item["retried_from"] for item in r.json()}
        assert listed == {first["id"]: None, retry["id"]: first["id"]}
        # The retry's events: reused nodes complete (cached) at once, then the rest run.
        events = await events_of(client, owner, wf, retry["id"])
        for event in events:
            MESSAGE.validate_python(event)
        assert events[0]["data"] == {"estimated_credits": 2, "retried_from": first["id"]}
        reused = [ev["node_id"] for ev in events[1:4]]
        assert sorted(reused) == ["a", "in", "side"]
        assert all(ev["type"] == "node.completed" and ev["data"]["cached"] for ev in events[1:4])
        assert [ev["seq"] for ev in events] == list(range(1, len(events) + 1))

    async def test_retry_without_changes_fails_again_and_charges_nothing(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf, first = await _failed_run(client, owner)
        before = await balance(client, owner)
        r = await _retry(client, owner, wf, first["id"])
        assert r.status_code == 202 and r.json()["estimated_credits"] == 2
        retry = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert retry["status"] == "failed" and retry["error"]["node_id"] == "bad"
        assert _nodes(retry)["after"]["status"] == "skipped"
        assert retry["credits_used"] == 0
        assert await balance(client, owner) == before
        assert await ledger_of(app, retry["id"]) == [("", "hold", 2), ("", "release", 2)]
        # A retry of the retry works too, and both show up on their source.
        r = await _retry(client, owner, wf, retry["id"], {"params": {"bad": {"template": "ok"}}})
        third = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert third["status"] == "completed" and third["retried_from"] == retry["id"]
        assert _nodes(third)["a"]["artifact_id"] == _nodes(first)["a"]["artifact_id"]
        r = await client.get(_url(wf, retry["id"]), headers=owner.headers)
        assert r.json()["retries"] == [third["id"]]

    async def test_changed_params_of_a_completed_node_run_it_and_its_descendants(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, first = await _failed_run(client, owner)
        params = {"a": {"template": "A2 {{ text }}"}, "bad": {"template": "{{ text }}+"}}
        r = await _retry(client, owner, wf, first["id"], {"params": params})
        assert r.json()["estimated_credits"] == 3
        retry = await wait_for_run(client, owner, wf, r.json()["run_id"])
        nodes = _nodes(retry)
        assert retry["status"] == "completed" and retry["credits_used"] == 3
        assert nodes["a"]["cached"] is False and nodes["side"]["cached"] is True
        assert await _text(client, owner, nodes["after"]["artifact_id"]) == "A2 x+!"

    async def test_retry_with_the_current_version_runs_the_fix_saved_since(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """The user fixes the failed node in the editor and saves, then retries: "graph":
        "current" runs the saved workflow, reusing what it did not change."""
        wf, first = await _failed_run(client, owner)
        fixed = FAILING | {"nodes": [dict(node) for node in FAILING["nodes"]]}
        by_id = {node["id"]: node for node in fixed["nodes"]}
        by_id["bad"]["data"] = {"template": "fixed {{ text }}"}
        by_id["side"]["data"] = {**by_id["side"]["data"], "label": "a note of the editor's"}
        by_id["after"]["position"] = {"x": 400, "y": 90}  # moved on the canvas
        r = await client.patch(
            f"/api/v1/workflows/{wf}", json={"graph_json": fixed}, headers=owner.headers
        )
        assert r.status_code == 200, r.text
        saved = r.json()["version"]
        # Without it, the run's own graph: the same failure, and the version that run ran.
        again = await _retry(client, owner, wf, first["id"])
        again_run = await wait_for_run(client, owner, wf, again.json()["run_id"])
        assert again_run["status"] == "failed"
        assert again_run["workflow_version"] == first["workflow_version"] == saved - 1
        r = await _retry(client, owner, wf, first["id"], {"graph": "current"})
        assert r.status_code == 202, r.text
        assert r.json()["estimated_credits"] == 2  # "bad" and "after" only
        retry = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert retry["status"] == "completed", retry
        assert retry["workflow_version"] == saved  # the version it ran, for its page and diffs
        old, new = _nodes(first), _nodes(retry)
        for reused in ("in", "a", "side"):  # unchanged, or changed outside their params
            assert new[reused]["cached"] is True
            assert new[reused]["artifact_id"] == old[reused]["artifact_id"]
        assert new["bad"]["cached"] is False
        assert await _text(client, owner, new["after"]["artifact_id"]) == "fixed A x!"
        assert retry["credits_used"] == 2
        # An edge rewired since the run makes its target run again; so do params given.
        rewired = fixed | {"edges": [*fixed["edges"][:-1], e("a", "side")]}
        await client.patch(
            f"/api/v1/workflows/{wf}", json={"graph_json": rewired}, headers=owner.headers
        )
        r = await _retry(
            client, owner, wf, first["id"],
            {"graph": "current", "params": {"after": {"template": "{{ text }}?"}}},
        )  # fmt: skip
        retry = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert retry["workflow_version"] is None  # its params make a graph no version holds
        nodes = _nodes(retry)
        # ("bad" ran as fixed in the retry before: the output cache answers it now.)
        assert {k for k, v in nodes.items() if not v["cached"]} == {"after", "side"}
        assert nodes["bad"]["artifact_id"] == new["bad"]["artifact_id"]
        assert await _text(client, owner, nodes["side"]["artifact_id"]) == "side A x"
        assert await _text(client, owner, nodes["after"]["artifact_id"]) == "fixed A x?"
        # A graph value other than "run" or "current" is a 400 pointing at it.
        bad = await _retry(client, owner, wf, first["id"], {"graph": "newest"})
        problem = assert_problem(bad, 400, "invalid_request")
        assert problem["errors"][0]["pointer"] == "/graph"

    async def test_cancelled_run_is_retried_from_where_it_stopped(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput", text="x"),
                n("t0", "TextTemplate", template="0 {{ text }}"),
                n("d", "Delay", seconds=30),
                n("t", "TextTemplate", template="{{ text }}."),
            ],
            [e("in", "t0"), e("t0", "d"), e("d", "t")],
        )
        wf = await create_workflow(client, owner, graph)
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        for _ in range(100):
            run = (await client.get(_url(wf, run_id), headers=owner.headers)).json()
            if _nodes(run)["d"]["status"] == "running":
                break
            await asyncio.sleep(0.05)
        # Still running: a retry is refused.
        r = await _retry(client, owner, wf, run_id)
        assert_problem(r, 409, "conflict")
        assert "running" in r.json()["detail"]
        await client.post(_url(wf, run_id, "cancel"), headers=owner.headers)
        first = await wait_for_run(client, owner, wf, run_id, timeout=10)
        assert first["status"] == "cancelled"
        r = await _retry(client, owner, wf, run_id, {"params": {"d": {"seconds": 0}}})
        assert r.status_code == 202, r.text
        retry = await wait_for_run(client, owner, wf, r.json()["run_id"])
        nodes = _nodes(retry)
        assert retry["status"] == "completed"
        assert nodes["t0"]["cached"] is True and nodes["t0"]["credits_used"] == 0
        assert await _text(client, owner, nodes["t"]["artifact_id"]) == "0 x."

    async def test_completed_run_is_a_conflict(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        await wait_for_run(client, owner, wf, run_id)
        r = await _retry(client, owner, wf, run_id)
        assert_problem(r, 409, "conflict")
        assert "completed" in r.json()["detail"]

    async def test_foreign_unknown_and_bad_requests(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf, first = await _failed_run(client, owner)
        assert_problem(await _retry(client, other, wf, first["id"]), 404, "not_found")
        missing = "00000000-0000-0000-0000-000000000000"
        assert_problem(await _retry(client, owner, wf, missing), 404, "not_found")
        assert_problem(await _retry(client, owner, missing, first["id"]), 404, "not_found")
        r = await _retry(client, owner, wf, first["id"], {"params": {"nope": {"template": "x"}}})
        assert_problem(r, 400, "invalid_request")
        problem = {"pointer": "/params/nope", "message": "the run has no such node"}
        assert r.json()["errors"] == [problem]
        r = await _retry(client, owner, wf, first["id"], {"params": {"bad": {"template": 5}}})
        assert_problem(r, 400, "invalid_graph")
        assert [err["pointer"] for err in r.json()["errors"]] == ["/params/bad/template"]
        r = await _retry(client, owner, wf, first["id"], {"params": {"bad": {"tempalte": "x"}}})
        assert_problem(r, 400, "invalid_request")
        assert [err["pointer"] for err in r.json()["errors"]] == ["/params/bad/tempalte"]
        assert "template" in r.json()["errors"][0]["message"]
        r = await _retry(client, owner, wf, first["id"], {"params": ["x"]})
        assert_problem(r, 400, "invalid_request")
        r = await client.post(
            _url(wf, first["id"], "retry"),
            content=b"{not json",
            headers={**owner.headers, "content-type": "application/json"},
        )
        assert r.status_code == 400
        # Nothing was started by any of these.
        r = await client.get(_url(wf, first["id"]), headers=owner.headers)
        assert r.json()["retries"] == []

    async def test_idempotency_key_replays_the_first_retry(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, first = await _failed_run(client, owner)
        key = {"Idempotency-Key": "retry-1"}
        body = {"params": {"bad": {"template": "B"}}}
        one = await _retry(client, owner, wf, first["id"], body, key)
        two = await _retry(client, owner, wf, first["id"], body, key)
        assert one.status_code == two.status_code == 202
        assert one.json() == two.json() and two.headers["idempotent-replayed"] == "true"
        other_body = {"params": {"bad": {"template": "C"}}}
        r = await _retry(client, owner, wf, first["id"], other_body, key)
        assert_problem(r, 422, "idempotency_key_reused")
        await wait_for_run(client, owner, wf, one.json()["run_id"])
        r = await client.get(_url(wf, first["id"]), headers=owner.headers)
        assert r.json()["retries"] == [one.json()["run_id"]]

    async def test_insufficient_credits_for_what_runs_again(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf, first = await _failed_run(client, owner)
        await set_credits(app, owner, 1)
        r = await _retry(client, owner, wf, first["id"])
        assert_problem(r, 402, "insufficient_credits")
