"""Workflow CRUD, scoping, paging, round-trip of graph_json."""

from __future__ import annotations

import copy
import re

import httpx

from tests.api.test_auth import assert_problem
from tests.conftest import User, text_graph


async def create(
    client: httpx.AsyncClient, user: User, name: str = "wf", graph: object = None
) -> dict[str, object]:
    r = await client.post(
        "/api/v1/workflows",
        json={"name": name, "graph_json": graph or text_graph()},
        headers=user.headers,
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


class TestCreateAndGet:
    async def test_create_returns_the_full_object(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        body = await create(client, owner, "Greeting")
        assert set(body) == {
            *("id", "name", "created_at", "updated_at", "node_count", "graph_json", "warnings"),
            "version",
        }
        assert body["name"] == "Greeting" and body["node_count"] == 2 and body["warnings"] == []
        r = await client.get(f"/api/v1/workflows/{body['id']}", headers=owner.jwt_headers)
        assert r.status_code == 200 and r.json() == body

    async def test_graph_round_trips_unchanged_with_ui_fields(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = text_graph()
        graph["nodes"][0].update(
            {
                "width": 150,
                "height": 40,
                "selected": True,
                "dragging": False,
                "positionAbsolute": {"x": 1.5, "y": 2},
            }
        )  # type: ignore[index]
        graph["nodes"][0]["data"]["label"] = "Ünïcode ✓"  # type: ignore[index]
        graph["edges"][0].update(
            {"animated": True, "style": {"stroke": "#f00"}, "sourceHandle": None}
        )  # type: ignore[index]
        graph["viewport"] = {"x": -12.25, "y": 3, "zoom": 0.75}
        graph["extra_top_level"] = {"kept": [1, 2, 3]}
        sent = copy.deepcopy(graph)
        body = await create(client, owner, graph=graph)
        r = await client.get(f"/api/v1/workflows/{body['id']}", headers=owner.headers)
        assert r.json()["graph_json"] == sent

    async def test_list_has_the_listed_shape(self, client: httpx.AsyncClient, owner: User) -> None:
        made = await create(client, owner)
        r = await client.get("/api/v1/workflows", headers=owner.headers)
        assert r.status_code == 200
        items = r.json()
        assert isinstance(items, list)
        assert items == [
            {"id": made["id"], "name": "wf", "created_at": made["created_at"], "node_count": 2}
        ]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(made["created_at"]))


class TestPaging:
    async def test_pages_newest_first_with_link_header(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        ids = [(await create(client, owner, f"w{i}"))["id"] for i in range(7)]
        seen: list[str] = []
        url: str | None = "/api/v1/workflows?limit=3"
        pages = 0
        while url:
            r = await client.get(url, headers=owner.headers)
            assert r.status_code == 200
            seen += [w["id"] for w in r.json()]
            pages += 1
            link = r.headers.get("link")
            url = re.match(r'<([^>]+)>; rel="next"', link).group(1) if link else None  # type: ignore[union-attr]
        assert pages == 3
        assert seen == list(reversed(ids))

    async def test_bad_paging_parameters_are_400(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        for query in ("limit=0", "limit=201", "limit=abc", "cursor=%%%", "cursor=bm9wZQ"):
            r = await client.get(f"/api/v1/workflows?{query}", headers=owner.headers)
            assert_problem(r, 400, "invalid_request")

    async def test_unknown_query_parameters_are_ignored(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.get("/api/v1/workflows?foo=bar", headers=owner.headers)
        assert r.status_code == 200


class TestUpdateAndDelete:
    async def test_patch_name_and_graph(self, client: httpx.AsyncClient, owner: User) -> None:
        made = await create(client, owner)
        r = await client.patch(
            f"/api/v1/workflows/{made['id']}", json={"name": "renamed"}, headers=owner.headers
        )
        assert r.status_code == 200
        assert r.json()["name"] == "renamed" and r.json()["graph_json"] == made["graph_json"]
        graph = text_graph()
        graph["nodes"].append(
            {"id": "solo", "type": "TextInput", "position": {"x": 0, "y": 1}, "data": {}}
        )  # type: ignore[attr-defined]
        r = await client.patch(
            f"/api/v1/workflows/{made['id']}", json={"graph_json": graph}, headers=owner.headers
        )
        assert r.status_code == 200 and r.json()["node_count"] == 3
        assert r.json()["updated_at"] >= made["updated_at"]

    async def test_patch_with_invalid_graph_changes_nothing(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        made = await create(client, owner)
        r = await client.patch(
            f"/api/v1/workflows/{made['id']}",
            json={"name": "x", "graph_json": {"nodes": []}},
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_graph")
        r = await client.get(f"/api/v1/workflows/{made['id']}", headers=owner.headers)
        assert r.json()["name"] == "wf"

    async def test_delete_then_404(self, client: httpx.AsyncClient, owner: User) -> None:
        made = await create(client, owner)
        r = await client.delete(f"/api/v1/workflows/{made['id']}", headers=owner.headers)
        assert r.status_code == 204 and r.content == b""
        for method in ("GET", "PATCH", "DELETE"):
            r = await client.request(
                method, f"/api/v1/workflows/{made['id']}", json={"name": "x"}, headers=owner.headers
            )
            assert_problem(r, 404, "not_found")
        assert (await client.get("/api/v1/workflows", headers=owner.headers)).json() == []


class TestScoping:
    async def test_another_accounts_workflow_is_404(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        made = await create(client, owner)
        for method in ("GET", "PATCH", "DELETE"):
            r = await client.request(
                method, f"/api/v1/workflows/{made['id']}", json={"name": "x"}, headers=other.headers
            )
            assert_problem(r, 404, "not_found")
        assert (await client.get("/api/v1/workflows", headers=other.headers)).json() == []
        assert (
            await client.get(f"/api/v1/workflows/{made['id']}", headers=owner.headers)
        ).status_code == 200

    async def test_unknown_and_malformed_ids_are_404(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        for wid in ("00000000-0000-0000-0000-000000000000", "not-a-uuid", "x" * 300):
            r = await client.get(f"/api/v1/workflows/{wid}", headers=owner.headers)
            assert_problem(r, 404, "not_found")
