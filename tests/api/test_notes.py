"""Sticky notes on the canvas (issue 37 item 21): a node of type ``Note`` is kept in the graph
as saved, and is not a node for anything else: it is not run, estimated, charged, listed in
the run's node runs or taken for an output, and it cannot be connected. Its text is checked
at save. Through the app over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import User
from tests.runs_helpers import (
    assert_graph_refused,
    assert_kept_never_run,
    create_workflow,
    e,
    g,
    n,
)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def noted(**note: object) -> dict[str, object]:
    return g(
        [
            n("in", "TextInput", text="fox"),
            n("tpl", "TextTemplate", template="a {{ text }}"),
            n("memo", "Note", text="Remember: the prompt goes in `in`.", **note),
        ],
        [e("in", "tpl")],
    )


async def test_a_note_is_kept_and_never_run(client: httpx.AsyncClient, owner: User) -> None:
    graph = noted(label="Read me", color="yellow")
    await assert_kept_never_run(client, owner, graph, "memo", {"in", "tpl"})


@pytest.mark.parametrize(
    ("graph", "pointer", "words"),
    [
        (
            g([n("in", "TextInput"), n("memo", "Note", text="x")], [e("memo", "in")]),
            "/graph_json/edges/0/source",
            "notes cannot be connected",
        ),
        (
            g([n("in", "TextInput"), n("tpl", "TextTemplate"), n("memo", "Note")],
              [e("in", "tpl"), e("tpl", "memo")]),
            "/graph_json/edges/1/target",
            "notes cannot be connected",
        ),
        (
            g([n("memo", "Note", text="x" * 10_001)], []),
            "/graph_json/nodes/0/data/text",
            "at most 10000 characters",
        ),
        (
            g([n("memo", "Note", text=["not", "text"])], []),
            "/graph_json/nodes/0/data/text",
            "a string",
        ),
        (
            g([n("dup", "Note"), n("dup", "TextInput")], []),
            "/graph_json/nodes/1/id",
            "duplicate node id",
        ),
    ],
)  # fmt: skip
async def test_a_bad_note_is_refused_with_its_pointer(
    client: httpx.AsyncClient, owner: User, graph: dict[str, object], pointer: str, words: str
) -> None:
    await assert_graph_refused(client, owner, graph, pointer, words)


async def test_node_count_leaves_notes_out(client: httpx.AsyncClient, owner: User) -> None:
    """A sticky note is not a node the workflow runs: the list, the workflow and its versions
    count the two real nodes, at creation and after a save that adds another note."""
    wf = await create_workflow(client, owner, noted())
    r = await client.get(f"/api/v1/workflows/{wf}", headers=owner.headers)
    assert r.json()["node_count"] == 2
    graph = noted()
    graph["nodes"].append(n("memo2", "Note", text="Another"))  # type: ignore[attr-defined]
    r = await client.patch(
        f"/api/v1/workflows/{wf}", json={"graph_json": graph}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["node_count"] == 2
    r = await client.get("/api/v1/workflows", headers=owner.headers)
    assert [w["node_count"] for w in r.json()] == [2]
    r = await client.get(f"/api/v1/workflows/{wf}/versions", headers=owner.headers)
    assert r.status_code == 200, r.text
    assert [v["node_count"] for v in r.json()] == [2, 2]
