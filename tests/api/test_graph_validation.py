"""Every invalid-graph case answers 400 invalid_graph, naming each problem by pointer."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from tests.api.test_auth import assert_problem
from tests.conftest import User, text_graph


def node(node_id: str, type_: str = "TextInput", **data: Any) -> dict[str, Any]:
    return {"id": node_id, "type": type_, "position": {"x": 0, "y": 0}, "data": data}


def edge(edge_id: str, source: str, target: str, **extra: Any) -> dict[str, Any]:
    return {"id": edge_id, "source": source, "target": target, **extra}


def graph(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": nodes, "edges": edges, "viewport": {"x": 0, "y": 0, "zoom": 1}}


async def problems_for(client: httpx.AsyncClient, user: User, body: Any) -> list[dict[str, str]]:
    r = await client.post("/api/v1/workflows", json=body, headers=user.headers)
    problem = assert_problem(r, 400, "invalid_graph")
    errors = problem["errors"]
    assert isinstance(errors, list) and errors
    return errors


CASES: list[tuple[str, Any, str, str]] = [
    ("missing name", {"graph_json": text_graph()}, "/name", "required"),
    ("empty name", {"name": " ", "graph_json": text_graph()}, "/name", "non-empty"),
    ("missing graph_json", {"name": "x"}, "/graph_json", "required"),
    ("graph not an object", {"name": "x", "graph_json": []}, "/graph_json", "object"),
    (
        "missing nodes",
        {"name": "x", "graph_json": {"edges": [], "viewport": {"x": 0, "y": 0, "zoom": 1}}},
        "/graph_json/nodes",
        "required",
    ),
    (
        "missing edges",
        {"name": "x", "graph_json": {"nodes": [], "viewport": {"x": 0, "y": 0, "zoom": 1}}},
        "/graph_json/edges",
        "required",
    ),
    (
        "missing viewport",
        {"name": "x", "graph_json": {"nodes": [], "edges": []}},
        "/graph_json/viewport",
        "required",
    ),
    (
        "viewport zoom not a number",
        {
            "name": "x",
            "graph_json": {"nodes": [], "edges": [], "viewport": {"x": 0, "y": 0, "zoom": "1"}},
        },
        "/graph_json/viewport/zoom",
        "number",
    ),
    (
        "duplicate node id",
        {"name": "x", "graph_json": graph([node("a"), node("a")], [])},
        "/graph_json/nodes/1/id",
        "duplicate",
    ),
    (
        "duplicate edge id",
        {
            "name": "x",
            "graph_json": graph(
                [node("a"), node("b", "TextTemplate"), node("c", "TextTemplate")],
                [edge("e", "a", "b"), edge("e", "a", "c")],
            ),
        },
        "/graph_json/edges/1/id",
        "duplicate",
    ),
    (
        "unknown type",
        {"name": "x", "graph_json": graph([node("a", "Teleport")], [])},
        "/graph_json/nodes/0/type",
        "unknown node type",
    ),
    (
        "edge to missing node",
        {"name": "x", "graph_json": graph([node("a")], [edge("e", "a", "ghost")])},
        "/graph_json/edges/0/target",
        "not a node",
    ),
    (
        "edge from missing node",
        {"name": "x", "graph_json": graph([node("a", "TextTemplate")], [edge("e", "ghost", "a")])},
        "/graph_json/edges/0/source",
        "not a node",
    ),
    (
        "unknown target handle",
        {
            "name": "x",
            "graph_json": graph(
                [node("a"), node("b", "TextTemplate")], [edge("e", "a", "b", targetHandle="prompt")]
            ),
        },
        "/graph_json/edges/0/targetHandle",
        "no input",
    ),
    (
        "unknown source handle",
        {
            "name": "x",
            "graph_json": graph(
                [node("a"), node("b", "TextTemplate")], [edge("e", "a", "b", sourceHandle="left")]
            ),
        },
        "/graph_json/edges/0/sourceHandle",
        "unknown handle",
    ),
    (
        "edge into a node without inputs",
        {"name": "x", "graph_json": graph([node("a"), node("b")], [edge("e", "a", "b")])},
        "/graph_json/edges/0/target",
        "takes no inputs",
    ),
    (
        "required input unconnected",
        {"name": "x", "graph_json": graph([node("d", "Delay")], [])},
        "/graph_json/nodes/0",
        "required input 'text'",
    ),
    (
        "params not matching schema",
        {
            "name": "x",
            "graph_json": graph(
                [node("a"), node("d", "Delay", seconds=301)], [edge("e", "a", "d")]
            ),
        },
        "/graph_json/nodes/1/data/seconds",
        "less than or equal",
    ),
    (
        "params of wrong type",
        {
            "name": "x",
            "graph_json": graph(
                [node("a"), node("d", "Delay", seconds="soon")], [edge("e", "a", "d")]
            ),
        },
        "/graph_json/nodes/1/data/seconds",
        "number",
    ),
    (
        "template syntax error",
        {"name": "x", "graph_json": graph([node("t", "TextTemplate", template="{% if %}")], [])},
        "/graph_json/nodes/0/data",
        "template",
    ),
    (
        "two edges into a single input",
        {
            "name": "x",
            "graph_json": graph(
                [node("a"), node("b"), node("t", "TextTemplate")],
                [edge("e1", "a", "t"), edge("e2", "b", "t")],
            ),
        },
        "/graph_json/edges/1/target",
        "takes one edge",
    ),
    (
        "too many nodes",
        {"name": "x", "graph_json": graph([node(f"n{i}") for i in range(501)], [])},
        "/graph_json/nodes",
        "at most 500",
    ),
    (
        "too many edges",
        {
            "name": "x",
            "graph_json": graph([node("a")], [edge(f"e{i}", "a", "a") for i in range(2001)]),
        },
        "/graph_json/edges",
        "at most 2000",
    ),
    (
        "node not an object",
        {"name": "x", "graph_json": graph(["a"], [])},
        "/graph_json/nodes/0",
        "object",
    ),  # type: ignore[list-item]
    (
        "bad position",
        {
            "name": "x",
            "graph_json": graph([{"id": "a", "type": "TextInput", "position": {"x": "left"}}], []),
        },
        "/graph_json/nodes/0/position",
        "numbers",
    ),
]


class TestInvalidGraphs:
    @pytest.mark.parametrize(
        ("case", "body", "pointer", "message"), CASES, ids=[c[0] for c in CASES]
    )
    async def test_case(
        self,
        client: httpx.AsyncClient,
        owner: User,
        case: str,
        body: Any,
        pointer: str,
        message: str,
    ) -> None:
        errors = await problems_for(client, owner, body)
        matching = [e for e in errors if e["pointer"] == pointer]
        assert matching, f"{case}: no error at {pointer}: {errors}"
        assert any(message in e["message"] for e in matching), errors

    async def test_cycle_names_its_nodes(self, client: httpx.AsyncClient, owner: User) -> None:
        g = graph(
            [
                node("src"),
                node("a", "TextTemplate"),
                node("b", "Delay"),
                node("c", "Delay"),
                node("tail", "Delay"),
            ],
            [
                edge("e0", "src", "tail"),
                edge("e1", "a", "b"),
                edge("e2", "b", "c"),
                edge("e3", "c", "a"),
            ],
        )
        errors = await problems_for(client, owner, {"name": "x", "graph_json": g})
        cycle = [e for e in errors if "cycle" in e["message"]]
        assert len(cycle) == 1
        for name in ("a", "b", "c"):
            assert name in cycle[0]["message"].split(" through nodes ")[1]
        assert "src" not in cycle[0]["message"] and "tail" not in cycle[0]["message"]

    async def test_kind_mismatch(self, client: httpx.AsyncClient, owner: User) -> None:
        # Needs a non-text kind: any catalog type whose output is not text into a text input.
        types = (await client.get("/api/v1/node-types", headers=owner.headers)).json()
        producers = [
            t for t in types if t["output"]["kind"] != "text" and not t["inputs"] and t["available"]
        ]
        if not producers:
            pytest.skip("no media source node in this catalog yet")
        p = producers[0]
        g = graph(
            [
                {"id": "img", "type": p["type"], "position": {"x": 0, "y": 0}, "data": {}},
                node("t", "TextTemplate"),
            ],
            [edge("e", "img", "t")],
        )
        errors = await problems_for(client, owner, {"name": "x", "graph_json": g})
        assert any(
            e["pointer"] == "/graph_json/edges/0/target" and "kind mismatch" in e["message"]
            for e in errors
        )

    async def test_every_problem_is_reported_at_once(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        g = graph(
            [node("a", "Nope"), node("a"), node("d", "Delay", seconds=-1)], [edge("e", "a", "zz")]
        )
        errors = await problems_for(client, owner, {"graph_json": g})
        pointers = {e["pointer"] for e in errors}
        assert {
            "/name",
            "/graph_json/nodes/0/type",
            "/graph_json/nodes/1/id",
            "/graph_json/nodes/2/data/seconds",
            "/graph_json/edges/0/target",
        } <= pointers

    async def test_nothing_is_stored_when_invalid(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        await problems_for(
            client, owner, {"name": "x", "graph_json": graph([node("a", "Nope")], [])}
        )
        assert (await client.get("/api/v1/workflows", headers=owner.headers)).json() == []

    async def test_valid_edge_cases_are_accepted(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        g = graph(
            [
                node("a"),
                {"id": "t", "type": "TextTemplate"},
                node("d", "Delay", seconds=0, label="UI label"),
            ],
            [
                edge("e1", "a", "t", targetHandle="text", sourceHandle="output"),
                edge("e2", "t", "d"),
            ],
        )
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "ok", "graph_json": copy.deepcopy(g)},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        assert r.json()["graph_json"] == g


class TestNodeLabels:
    """A node's name is React Flow's ``data.label``, beside its params: kept as saved,
    refused at save (with a pointer to it) when it is not one short line of text."""

    @pytest.mark.parametrize(
        ("label", "words"),
        [
            (42, "must be a string"),
            ("", "1 to 80 characters"),
            ("   ", "1 to 80 characters"),
            ("x" * 81, "1 to 80 characters"),
            ("two\nlines", "one line"),
            ("tab\there", "one line"),
            ("bidi\u202eflip", "one line"),
        ],
    )
    async def test_a_bad_label_is_refused_with_its_pointer(
        self, client: httpx.AsyncClient, owner: User, label: Any, words: str
    ) -> None:
        body = {"name": "x", "graph_json": graph([node("a"), node("b", label=label)], [])}
        errors = await problems_for(client, owner, body)
        found = [e for e in errors if e["pointer"] == "/graph_json/nodes/1/data/label"]
        assert found and words in found[0]["message"], errors

    async def test_a_label_is_kept_and_renamed(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        g = graph([node("a", label="Prompt ✍ für Füchse")], [])
        r = await client.post(
            "/api/v1/workflows", json={"name": "ok", "graph_json": g}, headers=owner.headers
        )
        assert r.status_code == 201, r.text
        wf = r.json()["id"]
        g["nodes"][0]["data"]["label"] = "x" * 80
        r = await client.patch(
            f"/api/v1/workflows/{wf}", json={"graph_json": g}, headers=owner.headers
        )
        assert r.status_code == 200, r.text
        assert r.json()["graph_json"]["nodes"][0]["data"]["label"] == "x" * 80
        g["nodes"][0]["data"]["label"] = "bell\x07"
        r = await client.patch(
            f"/api/v1/workflows/{wf}", json={"graph_json": g}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_graph")
