"""Input a client can send that used to break the server: NUL characters (a 503 "database
busy" on PostgreSQL, retried for ever), JSON nested deeper than the response encoder can go
(saved, then a 500 on every read), and graphs mixing junk with a cycle. Every one must be a
400 problem, on both databases, and nothing already stored may become unreadable."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.test_auth import assert_problem
from tests.conftest import PASSWORD, User, text_graph
from tests.runs_helpers import create_workflow, wait_for_run

NUL = "a\x00b"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 10**6, "rate_limit_jwt": 10**6, "rate_limit_webhook": 10**6}


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for i in range(depth - 1):
        value = {"k": value} if i % 2 else [value]
    return value


async def webhook(client: httpx.AsyncClient, user: User, workflow_id: str) -> dict[str, Any]:
    r = await client.post(
        f"/api/v1/workflows/{workflow_id}/webhooks",
        json={"name": "hook", "active": True},
        headers=user.headers,
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


class TestNul:
    async def test_in_login_and_signup_email(self, client: httpx.AsyncClient, owner: User) -> None:
        body = {"email": f"x{NUL}@example.com", "password": PASSWORD}
        assert_problem(await client.post("/api/v1/auth/login", json=body), 400, "invalid_request")
        assert_problem(await client.post("/api/v1/auth/signup", json=body), 400, "invalid_request")

    async def test_in_workflow_name_and_params(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        for body in (
            {"name": NUL, "graph_json": text_graph()},
            {"name": "ok", "graph_json": text_graph(f"Hello {NUL}")},
        ):
            r = await client.post("/api/v1/workflows", json=body, headers=owner.headers)
            problem = assert_problem(r, 400, "invalid_request")
            assert problem["errors"][0]["pointer"] in (
                "/name",
                "/graph_json/nodes/1/data/template",
            )

    async def test_in_path_and_query(self, client: httpx.AsyncClient, owner: User) -> None:
        for url in (
            "/api/v1/workflows/abc%00def",
            "/api/v1/workflows?cursor=%00",
            "/api/v1/artifacts/%00",
            "/api/v1/webhooks/%00x",
        ):
            r = await client.get(url, headers=owner.headers)
            assert_problem(r, 400, "invalid_request")

    async def test_in_key_webhook_names_and_run_inputs(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.post("/api/v1/api-keys", json={"name": NUL}, headers=owner.jwt_headers)
        assert_problem(r, 400, "invalid_request")
        wf = await create_workflow(client, owner, text_graph())
        r = await client.post(
            f"/api/v1/workflows/{wf}/webhooks",
            json={"name": NUL, "active": True},
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_request")
        hook = await webhook(client, owner, wf)
        r = await client.post(f"/api/v1/webhooks/{hook['token']}", json={"text": NUL})
        assert_problem(r, 400, "invalid_request")
        r = await client.post(
            f"/api/v1/workflows/{wf}/execute", json={"input": {NUL: 1}}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_request")

    async def test_an_escaped_backslash_is_not_a_nul(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        r = await client.post(
            f"/api/v1/workflows/{wf}/execute",
            json={"input": {"text": "\\u0000"}},
            headers=owner.headers,
        )
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["status"] == "completed"


LONE = "\udfff"


class TestLoneSurrogates:
    """A JSON escape of half a UTF-16 pair has no UTF-8 form: refused everywhere, with a
    pointer, on both databases (it was a 500 at log-in)."""

    @staticmethod
    async def post(
        client: httpx.AsyncClient, path: str, body: object, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """POST ``body`` as JSON with every non-ASCII character escaped (as most encoders
        write it; httpx itself would fail to encode a lone surrogate as UTF-8)."""
        headers = {**(headers or {}), "Content-Type": "application/json"}
        return await client.post(path, content=json.dumps(body), headers=headers)

    async def test_in_login_and_signup_email(self, client: httpx.AsyncClient, owner: User) -> None:
        body = {"email": f"{LONE}@x.io", "password": PASSWORD}
        for path in ("/api/v1/auth/login", "/api/v1/auth/signup"):
            problem = assert_problem(await self.post(client, path, body), 400, "invalid_request")
            assert problem["errors"] == [
                {"pointer": "/email", "message": "contains a lone surrogate"}
            ]
        body = {"email": "me@x.io", "password": f"long password {LONE}"}
        r = await self.post(client, "/api/v1/auth/login", body)
        assert_problem(r, 400, "invalid_request")

    async def test_in_workflows_keys_webhooks_and_inputs(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        body = {"name": LONE, "graph_json": text_graph()}
        r = await self.post(client, "/api/v1/workflows", body, owner.headers)
        assert assert_problem(r, 400, "invalid_request")["errors"][0]["pointer"] == "/name"
        r = await self.post(client, "/api/v1/api-keys", {"name": LONE}, owner.jwt_headers)
        assert_problem(r, 400, "invalid_request")
        wf = await create_workflow(client, owner, text_graph())
        r = await client.patch(
            f"/api/v1/workflows/{wf}",
            content=json.dumps({"name": f"a{LONE}"}),
            headers={**owner.headers, "Content-Type": "application/json"},
        )
        assert_problem(r, 400, "invalid_request")
        hook = await webhook(client, owner, wf)
        r = await self.post(client, f"/api/v1/webhooks/{hook['token']}", {"text": LONE})
        assert assert_problem(r, 400, "invalid_request")["errors"][0]["pointer"] == "/text"
        body = {"input": {LONE: 1}}
        r = await self.post(client, f"/api/v1/workflows/{wf}/execute", body, owner.headers)
        assert_problem(r, 400, "invalid_request")

    async def test_a_pair_is_a_character(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, text_graph())
        body = {"input": {"text": "\ud83d\ude00"}}  # U+1F600 as its two escaped halves
        r = await self.post(client, f"/api/v1/workflows/{wf}/execute", body, owner.headers)
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["status"] == "completed"
        artifact = run["node_runs"][-1]["artifact_id"]
        r = await client.get(f"/api/v1/artifacts/{artifact}", headers=owner.headers)
        assert r.text == "Hello \U0001f600!"

    async def test_a_node_that_makes_one_fails_with_a_code(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # Jinja turns the escape in its string literal into a lone surrogate.
        wf = await create_workflow(client, owner, text_graph('{{ "\\udfff" }} {{ text }}'))
        r = await client.post(f"/api/v1/workflows/{wf}/execute", json={}, headers=owner.headers)
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["status"] == "failed"
        error = run["node_runs"][-1]["error"]
        assert error["code"] == "invalid_text" and "lone surrogate" in error["message"]


class TestDepth:
    async def test_deep_graph_is_refused_and_nothing_unreadable_is_stored(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        for depth in (300, 65):
            graph = text_graph()
            graph["nodes"][0]["data"]["ui"] = nested(depth)  # type: ignore[index]
            r = await client.post(
                "/api/v1/workflows",
                json={"name": "deep", "graph_json": graph},
                headers=owner.headers,
            )
            problem = assert_problem(r, 400, "invalid_request")
            assert problem["errors"][0]["pointer"].startswith("/graph_json/nodes/0/data/ui")
        graph = text_graph()
        graph["nodes"][0]["data"]["ui"] = nested(58)  # type: ignore[index]
        wf = await create_workflow(client, owner, graph)
        r = await client.get(f"/api/v1/workflows/{wf}", headers=owner.headers)
        assert r.status_code == 200
        assert r.json()["graph_json"] == graph
        r = await client.patch(
            f"/api/v1/workflows/{wf}",
            json={"graph_json": {**graph, "deep": nested(200)}},
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_request")
        assert (await client.get("/api/v1/workflows", headers=owner.headers)).status_code == 200

    async def test_deep_run_input_and_webhook_body(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        # Deeper than any JSON encoder goes: written by hand.
        deep = '{"input": {"x": ' + "[" * 1020 + "1" + "]" * 1020 + "}}"
        r = await client.post(
            f"/api/v1/workflows/{wf}/execute",
            content=deep,
            headers={**owner.headers, "Content-Type": "application/json"},
        )
        assert_problem(r, 400, "invalid_request")
        hook = await webhook(client, owner, wf)
        r = await client.post(f"/api/v1/webhooks/{hook['token']}", json={"x": nested(300)})
        assert_problem(r, 400, "invalid_request")
        r = await client.post(
            "/api/v1/auth/login",
            json={"email": "a@example.com", "password": PASSWORD, "x": nested(300)},
        )
        assert_problem(r, 400, "invalid_request")


async def test_a_cycle_beside_junk_nodes_is_a_400(client: httpx.AsyncClient, owner: User) -> None:
    graph = text_graph()
    graph["nodes"] = ["junk", *graph["nodes"]]  # type: ignore[misc]
    graph["edges"].append({"id": "back", "source": "tpl", "target": "in"})  # type: ignore[attr-defined]
    graph["nodes"][1]["type"] = "TextTemplate"  # type: ignore[index]
    r = await client.post(
        "/api/v1/workflows", json={"name": "junk", "graph_json": graph}, headers=owner.headers
    )
    problem = assert_problem(r, 400, "invalid_graph")
    messages = " ".join(e["message"] for e in problem["errors"])
    assert "cycle" in messages and "must be an object" in messages


# -- property: whatever JSON arrives, no write endpoint answers 5xx --------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=30) | st.sampled_from(
    ["\x00", "x\x00", "ok", "a@example.com", "x" * 70_000]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
DEEP = st.integers(min_value=1, max_value=250).map(nested)  # httpx's encoder stops near 1,000
BODIES = JSON | DEEP | st.fixed_dictionaries({"name": TEXT, "graph_json": JSON | DEEP})


async def test_random_json_to_every_write_endpoint_is_never_a_5xx(
    client: httpx.AsyncClient, owner: User
) -> None:
    wf = await create_workflow(client, owner, text_graph())
    hook = await webhook(client, owner, wf)
    r = await client.post(f"/api/v1/workflows/{wf}/execute", headers=owner.headers)
    run_id = r.json()["run_id"]
    endpoints: list[tuple[str, str, dict[str, str]]] = [
        ("POST", "/api/v1/auth/signup", {}),
        ("POST", "/api/v1/auth/login", {}),
        ("POST", "/api/v1/workflows", owner.headers),
        ("PATCH", f"/api/v1/workflows/{wf}", owner.headers),
        ("POST", f"/api/v1/workflows/{wf}/execute", owner.headers),
        ("POST", "/api/v1/api-keys", owner.jwt_headers),
        ("POST", f"/api/v1/workflows/{wf}/webhooks", owner.headers),
        ("PATCH", f"/api/v1/workflows/{wf}/webhooks/{hook['id']}", owner.headers),
        ("POST", f"/api/v1/webhooks/{hook['token']}", {}),
        ("POST", f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", owner.headers),
    ]
    examples: list[object] = []

    @settings(
        max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(body=BODIES)
    def collect(body: object) -> None:
        examples.append(body)

    collect()
    for body in examples:
        for method, url, headers in endpoints:
            r = await client.request(method, url, json=body, headers=headers)
            assert r.status_code < 500, (method, url, body, r.text)
            if r.status_code >= 400:
                assert r.headers["content-type"] == "application/problem+json", r.text
    # Everything stored meanwhile still reads back.
    assert (
        await client.get("/api/v1/workflows?limit=200", headers=owner.headers)
    ).status_code == 200
    assert (await client.get(f"/api/v1/workflows/{wf}", headers=owner.headers)).status_code == 200
