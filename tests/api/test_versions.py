"""Workflow versions, If-Match on saves, and estimates: over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.api.test_auth import assert_problem
from tests.api.test_credentials import llm_graph
from tests.conftest import User, text_graph
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


def url(workflow_id: str, rest: str = "") -> str:
    return f"/api/v1/workflows/{workflow_id}{rest}"


async def create(client: httpx.AsyncClient, user: User, **extra: Any) -> httpx.Response:
    body = {"name": "wf", "graph_json": text_graph(), **extra}
    r = await client.post("/api/v1/workflows", json=body, headers=user.headers)
    assert r.status_code == 201, r.text
    return r


async def patch(
    client: httpx.AsyncClient,
    user: User,
    workflow_id: str,
    body: dict[str, Any],
    if_match: str | None = None,
) -> httpx.Response:
    headers = dict(user.headers)
    if if_match is not None:
        headers["If-Match"] = if_match
    return await client.patch(url(workflow_id), json=body, headers=headers)


async def versions(client: httpx.AsyncClient, user: User, workflow_id: str) -> list[Any]:
    r = await client.get(url(workflow_id, "/versions"), headers=user.headers)
    assert r.status_code == 200, r.text
    return list(r.json())


class TestVersions:
    async def test_create_makes_version_one_with_its_author(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await create(client, owner, message="first draft")
        wf = r.json()
        assert wf["version"] == 1 and r.headers["etag"] == '"v1"'
        [v1] = await versions(client, owner, wf["id"])
        assert v1 == {
            "workflow_id": wf["id"],
            "version": 1,
            "name": "wf",
            "node_count": 2,
            "created_at": wf["updated_at"],
            "created_by": {
                "account_id": owner.id,
                "email": owner.email,
                "via": "api_key",
                "api_key_id": v1["created_by"]["api_key_id"],
                "api_key_name": "test",
            },
            "message": "first draft",
            "restored_from": None,
        }
        assert v1["created_by"]["api_key_id"]
        r = await client.get(url(wf["id"]), headers=owner.headers)
        assert r.headers["etag"] == '"v1"' and r.json()["version"] == 1

    async def test_every_save_adds_an_immutable_version(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = (await create(client, owner)).json()
        first_graph = wf["graph_json"]
        r = await client.patch(
            url(wf["id"]),
            json={"graph_json": text_graph("Bye {{ text }}"), "message": "say bye"},
            headers=owner.jwt_headers,
        )
        assert r.status_code == 200 and r.json()["version"] == 2
        assert r.headers["etag"] == '"v2"'
        r = await patch(client, owner, wf["id"], {"name": "renamed"})
        assert r.status_code == 200 and r.json()["version"] == 3
        listed = await versions(client, owner, wf["id"])
        assert [v["version"] for v in listed] == [3, 2, 1]  # newest first
        assert [v["name"] for v in listed] == ["renamed", "wf", "wf"]
        assert listed[1]["message"] == "say bye" and listed[1]["created_by"]["via"] == "jwt"
        assert listed[1]["created_by"]["api_key_id"] is None
        assert "graph_json" not in listed[0]
        r = await client.get(url(wf["id"], "/versions/1"), headers=owner.headers)
        assert r.status_code == 200 and r.json()["graph_json"] == first_graph
        r = await client.get(url(wf["id"], "/versions/3"), headers=owner.headers)
        v3 = r.json()
        assert v3["graph_json"]["nodes"][1]["data"]["template"] == "Bye {{ text }}"
        # Versions are read-only: no route changes or deletes one.
        for method in ("PATCH", "PUT", "DELETE"):
            r = await client.request(method, url(wf["id"], "/versions/1"), headers=owner.headers)
            assert r.status_code == 405, (method, r.text)
        r = await client.get(url(wf["id"], "/versions/1"), headers=owner.headers)
        assert r.json()["graph_json"] == first_graph

    async def test_restore_saves_the_old_content_as_a_new_version(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = (await create(client, owner)).json()
        await patch(client, owner, wf["id"], {"name": "v2", "graph_json": text_graph("Two")})
        r = await client.post(url(wf["id"], "/versions/1/restore"), headers=owner.headers)
        assert r.status_code == 200, r.text
        restored = r.json()
        assert restored["version"] == 3 and r.headers["etag"] == '"v3"'
        assert restored["name"] == "wf" and restored["graph_json"] == wf["graph_json"]
        listed = await versions(client, owner, wf["id"])
        assert [v["version"] for v in listed] == [3, 2, 1]
        assert listed[0]["restored_from"] == 1 and listed[0]["message"] == "Restored version 1"
        r = await client.post(
            url(wf["id"], "/versions/2/restore"),
            json={"message": "back to two"},
            headers={**owner.headers, "If-Match": '"v3"'},
        )
        assert r.status_code == 200 and r.json()["graph_json"]["nodes"][1]["data"] == {
            "template": "Two"
        }
        assert (await versions(client, owner, wf["id"]))[0]["message"] == "back to two"

    async def test_a_version_that_no_longer_validates_is_not_restored(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        fields = {"base_url": "https://api.example.com/v1", "api_key": "sk-versions-0000"}
        r = await client.post(
            "/api/v1/credentials",
            json={"name": "c", "kind": "openai", "fields": fields},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        credential = r.json()["id"]
        wf = (await create(client, owner, graph_json=llm_graph(credential))).json()
        await patch(client, owner, wf["id"], {"graph_json": text_graph()})
        r = await client.delete(f"/api/v1/credentials/{credential}", headers=owner.headers)
        assert r.status_code == 204
        r = await client.post(url(wf["id"], "/versions/1/restore"), headers=owner.headers)
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"][0]["pointer"] == "/graph_json/nodes/1/data/credential"
        current = (await client.get(url(wf["id"]), headers=owner.headers)).json()
        assert current["version"] == 2 and current["graph_json"] == text_graph()
        assert len(await versions(client, owner, wf["id"])) == 2

    async def test_missing_version_and_bad_numbers(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = (await create(client, owner)).json()
        r = await client.get(url(wf["id"], "/versions/2"), headers=owner.headers)
        assert_problem(r, 404, "not_found")
        r = await client.post(url(wf["id"], "/versions/9/restore"), headers=owner.headers)
        assert_problem(r, 404, "not_found")
        for bad in ("0", "abc", "-1"):
            r = await client.get(url(wf["id"], f"/versions/{bad}"), headers=owner.headers)
            assert_problem(r, 400, "invalid_request")
        r = await client.post(
            url(wf["id"], "/versions/1/restore"), json={"message": 5}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_request")
        r = await patch(client, owner, wf["id"], {"message": "x" * 1001})
        assert_problem(r, 400, "invalid_graph")
        assert r.json()["errors"][0]["pointer"] == "/message"

    async def test_versions_are_paged(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = (await create(client, owner)).json()
        for i in range(4):
            await patch(client, owner, wf["id"], {"name": f"n{i}"})
        seen: list[int] = []
        next_url: str | None = url(wf["id"], "/versions?limit=2")
        while next_url:
            r = await client.get(next_url, headers=owner.headers)
            assert r.status_code == 200
            seen += [v["version"] for v in r.json()]
            link = r.headers.get("link")
            next_url = link[1 : link.index(">")] if link else None
        assert seen == [5, 4, 3, 2, 1]
        r = await client.get(url(wf["id"], "/versions?cursor=nonsense"), headers=owner.headers)
        assert_problem(r, 400, "invalid_request")

    async def test_another_accounts_workflow_is_not_found(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = (await create(client, owner)).json()
        for method, path in (
            ("GET", "/versions"),
            ("GET", "/versions/1"),
            ("POST", "/versions/1/restore"),
            ("POST", "/estimate"),
        ):
            r = await client.request(method, url(wf["id"], path), headers=other.headers)
            assert_problem(r, 404, "not_found")
        assert len(await versions(client, owner, wf["id"])) == 1

    async def test_deleted_workflow_has_no_versions(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = (await create(client, owner)).json()
        assert (await client.delete(url(wf["id"]), headers=owner.headers)).status_code == 204
        r = await client.get(url(wf["id"], "/versions"), headers=owner.headers)
        assert_problem(r, 404, "not_found")


class TestIfMatch:
    async def test_second_editor_gets_412_and_nothing_is_saved(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = (await create(client, owner)).json()
        tab_a = (await client.get(url(wf["id"]), headers=owner.headers)).headers["etag"]
        tab_b = (await client.get(url(wf["id"]), headers=owner.headers)).headers["etag"]
        r = await patch(client, owner, wf["id"], {"graph_json": text_graph("A")}, tab_a)
        assert r.status_code == 200 and r.headers["etag"] == '"v2"'
        r = await patch(client, owner, wf["id"], {"graph_json": text_graph("B")}, tab_b)
        assert_problem(r, 412, "precondition_failed")
        assert r.json()["current_version"] == 2 and r.headers["etag"] == '"v2"'
        saved = (await client.get(url(wf["id"]), headers=owner.headers)).json()
        assert saved["version"] == 2 and saved["graph_json"]["nodes"][1]["data"]["template"] == "A"
        assert len(await versions(client, owner, wf["id"])) == 2
        # Reloaded, tab B saves with the new ETag.
        r = await patch(client, owner, wf["id"], {"graph_json": text_graph("B")}, '"v2"')
        assert r.status_code == 200 and r.json()["version"] == 3

    async def test_concurrent_saves_with_the_same_etag_one_wins(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = (await create(client, owner)).json()
        answers = await asyncio.gather(
            *(
                patch(client, owner, wf["id"], {"graph_json": text_graph(f"T{i}")}, '"v1"')
                for i in range(4)
            )
        )
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 412, 412, 412], [r.text for r in answers]
        listed = await versions(client, owner, wf["id"])
        assert [v["version"] for v in listed] == [2, 1]

    async def test_concurrent_saves_without_if_match_all_get_versions(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = (await create(client, owner)).json()
        answers = await asyncio.gather(
            *(patch(client, owner, wf["id"], {"name": f"n{i}"}) for i in range(4))
        )
        assert all(r.status_code == 200 for r in answers)
        assert sorted(r.json()["version"] for r in answers) == [2, 3, 4, 5]
        assert [v["version"] for v in await versions(client, owner, wf["id"])] == [5, 4, 3, 2, 1]

    async def test_header_forms(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = (await create(client, owner)).json()
        ok = [("*", 2), ('"v0", "v2"', 3), ('"v9" ,"v3"', 4)]
        for value, version in ok:
            r = await patch(client, owner, wf["id"], {"name": value}, value)
            assert r.status_code == 200, (value, r.text)
            assert r.json()["version"] == version
        r = await patch(client, owner, wf["id"], {"name": "weak"}, 'W/"v4"')
        assert_problem(r, 412, "precondition_failed")  # If-Match compares strongly
        for malformed in ("v4", '"v4', '"v4" "v5"', "", ","):
            r = await patch(client, owner, wf["id"], {"name": "bad"}, malformed)
            assert_problem(r, 400, "invalid_request")
            assert r.json()["errors"][0]["pointer"] == "header:If-Match", malformed
        assert (await client.get(url(wf["id"]), headers=owner.headers)).json()["version"] == 4

    async def test_stale_restore_is_refused(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = (await create(client, owner)).json()
        await patch(client, owner, wf["id"], {"name": "two"})
        r = await client.post(
            url(wf["id"], "/versions/1/restore"), headers={**owner.headers, "If-Match": '"v1"'}
        )
        assert_problem(r, 412, "precondition_failed")
        assert len(await versions(client, owner, wf["id"])) == 2

    async def test_unknown_workflow_is_404_before_the_precondition(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        missing = "00000000-0000-0000-0000-000000000000"
        r = await patch(client, owner, missing, {"name": "x"}, '"v1"')
        assert_problem(r, 404, "not_found")


def priced_graph() -> dict[str, Any]:
    """Priced nodes (1 + 2 + 1 credits) behind a free input."""
    return g(
        [
            n("in", "TextInput", text="hello"),
            n("tpl", "TextTemplate", template="{{ text }}!"),
            n("img", "RenderText", width=64, height=64),
            n("small", "ImageResize", width=32, height=32),
        ],
        [e("in", "tpl"), e("tpl", "img"), e("img", "small")],
    )


class TestRunRecordsItsVersion:
    async def test_run_names_the_version_it_ran(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        first = (await execute(client, owner, wf)).json()["run_id"]
        await patch(client, owner, wf, {"graph_json": text_graph("Second {{ text }}")})
        second = (await execute(client, owner, wf)).json()["run_id"]
        run1 = await wait_for_run(client, owner, wf, first)
        run2 = await wait_for_run(client, owner, wf, second)
        assert run1["workflow_version"] == 1 and run2["workflow_version"] == 2
        listed = (await client.get(url(wf, "/runs"), headers=owner.headers)).json()
        assert {r["id"]: r["workflow_version"] for r in listed} == {first: 1, second: 2}
        # What ran is the version's graph: the second run's output is the second template.
        art = run2["node_runs"][1]["artifact_id"]
        r = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
        assert r.text == "Second world"

    async def test_webhook_runs_record_it_too(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, text_graph())
        await patch(client, owner, wf, {"name": "v2"})
        hook = await client.post(url(wf, "/webhooks"), json={"name": "h"}, headers=owner.headers)
        assert hook.status_code == 201, hook.text
        r = await client.post(hook.json()["url"].removeprefix("http://testserver"), json={})
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["trigger"] == "webhook" and run["workflow_version"] == 2


class TestEstimate:
    async def test_estimate_per_node_then_a_run_charges_it(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, priced_graph())
        before = await balance(client, owner)
        r = await client.post(
            url(wf, "/estimate"), json={"input": {"text": "hi"}}, headers=owner.headers
        )
        assert r.status_code == 200, r.text
        estimate = r.json()
        assert estimate == {
            "estimated_credits": 4,
            "credits_balance": before,
            "sufficient": True,
            "workflow_version": 1,
            "nodes": [
                {"node_id": "in", "type": "TextInput", "credits": 0},
                {"node_id": "tpl", "type": "TextTemplate", "credits": 1},
                {"node_id": "img", "type": "RenderText", "credits": 2},
                {"node_id": "small", "type": "ImageResize", "credits": 1},
            ],
        }
        # Nothing held, charged or created.
        assert await balance(client, owner) == before
        assert (await client.get(url(wf, "/runs"), headers=owner.headers)).json() == []
        # A real run holds the estimate and charges each node what the estimate said.
        r = await execute(client, owner, wf, {"input": {"text": "hi"}, "cache": False})
        assert r.json()["estimated_credits"] == estimate["estimated_credits"]
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["status"] == "completed", run
        assert run["credits_used"] == estimate["estimated_credits"]
        charged = {nr["node_id"]: nr["credits_used"] for nr in run["node_runs"]}
        assert charged == {x["node_id"]: x["credits"] for x in estimate["nodes"]}
        assert await balance(client, owner) == before - 4

    async def test_body_is_optional_and_checked_like_execute(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, priced_graph())
        r = await client.post(url(wf, "/estimate"), headers=owner.headers)
        assert r.status_code == 200 and r.json()["estimated_credits"] == 4
        r = await client.get(url(wf, "/estimate"), headers=owner.headers)
        assert r.status_code == 200 and r.json()["estimated_credits"] == 4
        for bad in ({"input": 5}, {"cache": "maybe"}, [1]):
            r = await client.post(url(wf, "/estimate"), json=bad, headers=owner.headers)
            assert_problem(r, 400, "invalid_request")
        r = await client.post(url(wf, "/estimate"), content=b"{not json", headers=owner.headers)
        assert_problem(r, 400, "invalid_request")
        r = await client.post(
            url("00000000-0000-0000-0000-000000000000", "/estimate"), headers=owner.headers
        )
        assert_problem(r, 404, "not_found")

    async def test_insufficient_balance_is_reported_not_refused(
        self, client: httpx.AsyncClient, other: User
    ) -> None:
        big = priced_graph()
        big["nodes"] += [n(f"r{i}", "RenderText", width=16, height=16) for i in range(60)]
        big["edges"] += [e("tpl", f"r{i}") for i in range(60)]
        wf = await create_workflow(client, other, big)
        have = await balance(client, other)
        assert have < 124
        r = await client.post(url(wf, "/estimate"), headers=other.headers)
        assert r.status_code == 200, r.text
        assert r.json()["estimated_credits"] == 124 and r.json()["sufficient"] is False
        r = await execute(client, other, wf)
        body = assert_problem(r, 402, "insufficient_credits")
        assert body["required"] == 124 and body["available"] == have
