"""Problem+json everywhere, OpenAPI, health and readiness, node catalog."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.test_auth import assert_problem
from tests.conftest import User, text_graph
from tests.runs_helpers import create_workflow

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=25,
)
GRAPHISH = st.fixed_dictionaries(
    {},
    optional={
        "name": JSON | st.text(max_size=30),
        "graph_json": st.fixed_dictionaries(
            {},
            optional={
                "nodes": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "id": st.sampled_from(["a", "b", "c", ""]) | JSON,
                            "type": st.sampled_from(["TextInput", "TextTemplate", "Delay", "Nope"])
                            | JSON,
                            "data": st.dictionaries(
                                st.sampled_from(["text", "key", "template", "seconds"]),
                                JSON,
                                max_size=3,
                            )
                            | JSON,
                            "position": JSON,
                        },
                    )
                    | JSON,
                    max_size=5,
                )
                | JSON,
                "edges": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "id": st.sampled_from(["e1", "e2"]) | JSON,
                            "source": st.sampled_from(["a", "b", "c"]) | JSON,
                            "target": st.sampled_from(["a", "b", "c"]) | JSON,
                            "targetHandle": st.sampled_from(["text", "x"]) | JSON,
                            "sourceHandle": JSON,
                        },
                    ),
                    max_size=5,
                )
                | JSON,
                "viewport": st.fixed_dictionaries(
                    {
                        "x": JSON,
                        "y": st.floats(allow_nan=False, allow_infinity=False),
                        "zoom": st.integers(),
                    }
                )
                | JSON,
            },
        )
        | JSON,
    },
)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 10_000}


class TestProblems:
    async def test_unknown_route_is_problem_404(self, client: httpx.AsyncClient) -> None:
        assert_problem(await client.get("/api/v1/nothing-here"), 404, "not_found")

    async def test_wrong_method_is_problem_405(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.put("/api/v1/workflows", headers=owner.headers)
        assert_problem(r, 405, "method_not_allowed")
        assert r.headers["allow"] == "GET, POST"

    async def test_405_names_every_method_of_the_path(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """Allow lists what each route at the path takes, not only the first route's; a
        path whose routes take only POST is 405 to a GET, not an unknown path."""
        wf = await create_workflow(client, owner, text_graph())
        run = f"/api/v1/workflows/{wf}/runs/{'0' * 8}-0000-0000-0000-{'0' * 12}"
        for method, path, allow in (
            ("PUT", f"/api/v1/workflows/{wf}", "DELETE, GET, PATCH"),
            ("PATCH", "/api/v1/api-keys", "GET, POST"),
            ("GET", "/api/v1/webhooks/sometoken", "POST"),
            ("HEAD", "/api/v1/webhooks/sometoken", "POST"),
            ("GET", f"/api/v1/workflows/{wf}/execute", "POST"),
            ("GET", f"{run}/cancel", "POST"),
        ):
            r = await client.request(method, path, headers=owner.headers)
            assert r.status_code == 405, (method, path, r.status_code)
            assert r.headers["allow"] == allow, (method, path)
            if method != "HEAD":
                assert_problem(r, 405, "method_not_allowed")
        # No API route at all: unknown, whatever the method.
        for method in ("GET", "POST", "DELETE"):
            r = await client.request(method, "/api/v1/webhooks/a/b", headers=owner.headers)
            assert_problem(r, 404, "not_found")
            assert "allow" not in r.headers

    async def test_hypothesis_no_body_ever_gives_500(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        statuses: set[int] = set()

        # hypothesis drives sync functions: draw the examples first, then send each one.
        examples: list[object] = []

        @settings(
            max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        @given(body=GRAPHISH | JSON)
        def collect(body: object) -> None:
            examples.append(body)

        collect()
        for body in examples:
            r = await client.post("/api/v1/workflows", json=body, headers=owner.headers)
            statuses.add(r.status_code)
            assert r.status_code in (201, 400), (body, r.text)
            if r.status_code == 400:
                assert r.headers["content-type"] == "application/problem+json"
                assert r.json()["code"] in ("invalid_graph", "invalid_request")
        assert 400 in statuses

    async def test_a_header_that_fails_is_named_whatever_the_body(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # Execute takes no body at all: the over-long header is the whole problem.
        wf = (
            await client.post(
                "/api/v1/workflows",
                json={"name": "w", "graph_json": text_graph()},
                headers=owner.headers,
            )
        ).json()["id"]
        r = await client.post(
            f"/api/v1/workflows/{wf}/execute",
            headers={**owner.headers, "Idempotency-Key": "k" * 256},
        )
        problem = assert_problem(r, 400, "invalid_request")
        assert "idempotency-key" in str(problem["detail"]).lower(), problem
        assert "Send the body as JSON" not in str(problem["detail"])


class TestDocsAndHealth:
    async def test_openapi_describes_every_endpoint(self, client: httpx.AsyncClient) -> None:
        r = await client.get("/api/v1/openapi.json")
        assert r.status_code == 200
        spec = r.json()
        paths = spec["paths"]
        for path, method in [
            ("/api/v1/workflows", "get"),
            ("/api/v1/workflows", "post"),
            ("/api/v1/workflows/{workflow_id}", "patch"),
            ("/api/v1/auth/login", "post"),
            ("/api/v1/auth/signup", "post"),
            ("/api/v1/api-keys", "post"),
            ("/api/v1/node-types", "get"),
            ("/api/v1/me", "get"),
        ]:
            assert method in paths[path], (path, method)
        create = paths["/api/v1/workflows"]["post"]
        assert create["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "/WorkflowCreate"
        )
        assert "WorkflowCreate" in spec["components"]["schemas"]

    async def test_health_and_ready(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).json() == {"status": "ready"}


class TestNodeTypes:
    async def test_catalog_lists_fixed_types_with_schema_and_price(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.get("/api/v1/node-types", headers=owner.headers)
        assert r.status_code == 200
        types = {t["type"]: t for t in r.json()}
        assert {"TextInput", "TextTemplate", "Delay"} <= set(types)
        assert types["TextInput"]["inputs"] == []
        assert set(types["TextInput"]["params_schema"]["properties"]) >= {"key", "text"}
        assert types["TextTemplate"]["inputs"] == [
            {"name": "text", "kind": "text", "required": False, "multiple": False}
        ]
        assert types["Delay"]["params_schema"]["properties"]["seconds"]["maximum"] == 300
        for t in types.values():
            assert t["cost"]["credits"] >= 0 and t["output"]["content_type"] in {
                "text/plain",
                "image/png",
                "audio/mpeg",
                "video/mp4",
            }

    async def test_needs_credentials(self, client: httpx.AsyncClient) -> None:
        assert_problem(await client.get("/api/v1/node-types"), 401, "unauthorized")
