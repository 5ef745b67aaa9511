"""Groups on the canvas (issue 37 item 21): a node of type ``Group`` is a titled frame kept in
the graph as saved; the nodes inside it name it in ``parentId`` (React Flow's sub flows). It
is not a node for anything else: not run, estimated, charged, listed in the run's node runs
or counted in ``node_count``, and it cannot be connected. A ``parentId`` must name a group.
Through the app over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

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


def inside(node: dict[str, Any], parent: str, x: float, y: float) -> dict[str, Any]:
    return {**node, "parentId": parent, "position": {"x": x, "y": y}}


def grouped() -> dict[str, Any]:
    frame = {
        **n("frame", "Group", label="Prompt"),
        "position": {"x": 100, "y": 50},
        "style": {"width": 400, "height": 200},
    }
    return g(
        [
            frame,
            inside(n("in", "TextInput", text="fox"), "frame", 20, 40),
            inside(n("tpl", "TextTemplate", template="a {{ text }}"), "frame", 220, 40),
            n("out", "TextTemplate", template="{{ text }}!"),
        ],
        [e("in", "tpl"), e("tpl", "out")],
    )


async def test_a_group_is_kept_and_never_run(client: httpx.AsyncClient, owner: User) -> None:
    saved = await assert_kept_never_run(client, owner, grouped(), "frame", {"in", "tpl", "out"})
    assert saved["node_count"] == 3


def frame(node_id: str = "frame", **data: object) -> dict[str, Any]:
    return n(node_id, "Group", **data)


@pytest.mark.parametrize(
    ("graph", "pointer", "words"),
    [
        (
            g([frame(), n("in", "TextInput")], [e("frame", "in")]),
            "/graph_json/edges/0/source",
            "groups cannot be connected",
        ),
        (
            g([n("in", "TextInput"), frame()], [e("in", "frame")]),
            "/graph_json/edges/0/target",
            "groups cannot be connected",
        ),
        (
            g([frame(), inside(n("in", "TextInput"), "nowhere", 0, 0)], []),
            "/graph_json/nodes/1/parentId",
            "is not a group of this graph",
        ),
        (
            g([n("a", "TextInput"), inside(n("in", "TextInput"), "a", 0, 0)], []),
            "/graph_json/nodes/1/parentId",
            "is not a group of this graph",
        ),
        (
            g([n("memo", "Note"), inside(n("in", "TextInput"), "memo", 0, 0)], []),
            "/graph_json/nodes/1/parentId",
            "is not a group of this graph",
        ),
        (
            g([frame(), {**n("in", "TextInput"), "parentId": 7}], []),
            "/graph_json/nodes/1/parentId",
            "is not a group of this graph",
        ),
        (
            g([frame("outer"), inside(frame("inner"), "outer", 0, 0)], []),
            "/graph_json/nodes/1/parentId",
            "cannot be inside another group",
        ),
        (
            g([frame(label="x" * 81)], []),
            "/graph_json/nodes/0/data/label",
            "1 to 80 characters",
        ),
        (
            g([{**frame(), "data": "Prompt"}], []),
            "/graph_json/nodes/0/data",
            "must be an object",
        ),
        (
            g([frame("dup"), n("dup", "TextInput")], []),
            "/graph_json/nodes/1/id",
            "duplicate node id",
        ),
    ],
)  # fmt: skip
async def test_a_bad_group_is_refused_with_its_pointer(
    client: httpx.AsyncClient, owner: User, graph: dict[str, object], pointer: str, words: str
) -> None:
    await assert_graph_refused(client, owner, graph, pointer, words)


async def test_a_group_can_be_saved_again_and_ungrouped(
    client: httpx.AsyncClient, owner: User
) -> None:
    wf = await create_workflow(client, owner, grouped())
    flat = g(
        [n("in", "TextInput", text="fox"), n("tpl", "TextTemplate", template="a {{ text }}")],
        [e("in", "tpl")],
    )
    r = await client.patch(
        f"/api/v1/workflows/{wf}", json={"graph_json": flat}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["node_count"] == 2
