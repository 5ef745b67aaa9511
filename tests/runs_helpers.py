"""Helpers for tests that execute workflows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.api.test_auth import assert_problem
from tests.conftest import User


async def create_workflow(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], name: str = "wf"
) -> str:
    r = await client.post(
        "/api/v1/workflows", json={"name": name, "graph_json": graph}, headers=user.headers
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def execute(
    client: httpx.AsyncClient,
    user: User,
    workflow_id: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        f"/api/v1/workflows/{workflow_id}/execute",
        json=body,
        headers={**user.headers, **(headers or {})},
    )


async def wait_for_run(
    client: httpx.AsyncClient, user: User, workflow_id: str, run_id: str, timeout: float = 20.0
) -> dict[str, Any]:
    return await _poll_run(
        client, user, workflow_id, run_id, lambda body: body["status"] != "running", timeout
    )


async def wait_for_node(
    client: httpx.AsyncClient,
    user: User,
    workflow_id: str,
    run_id: str,
    node_id: str,
    status: str = "running",
    timeout: float = 20.0,
) -> dict[str, Any]:
    """The run once its node ``node_id`` has ``status`` (a node running: the moment to
    cancel, delete or restart while it runs, instead of a guessed sleep)."""

    def reached(body: dict[str, Any]) -> bool:
        return any(nr["node_id"] == node_id and nr["status"] == status for nr in body["node_runs"])

    return await _poll_run(client, user, workflow_id, run_id, reached, timeout)


async def _poll_run(
    client: httpx.AsyncClient,
    user: User,
    workflow_id: str,
    run_id: str,
    reached: Callable[[dict[str, Any]], bool],
    timeout: float,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    # Backing off as a client should: a run queued on PostgreSQL may take seconds, and
    # polling every 20 ms would spend the key's 100 requests a minute.
    delay = 0.02
    while True:
        r = await client.get(f"/api/v1/workflows/{workflow_id}/runs/{run_id}", headers=user.headers)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        if reached(body):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} not there after {timeout}s: {body}")
        await asyncio.sleep(delay)
        delay = min(0.25, delay * 1.5)


async def balance(client: httpx.AsyncClient, user: User) -> int:
    r = await client.get("/api/v1/me", headers=user.jwt_headers)
    return int(r.json()["credits_balance"])


def n(node_id: str, type_: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "type": type_, "position": {"x": 0, "y": 0}, "data": data}


def e(source: str, target: str, handle: str | None = None) -> dict[str, Any]:
    edge: dict[str, Any] = {"id": f"{source}->{target}", "source": source, "target": target}
    if handle:
        edge["targetHandle"] = handle
    return edge


def edge(
    source: str, target: str, out: str | None = None, into: str | None = None
) -> dict[str, Any]:
    """An edge from the output ``out`` of ``source`` (If's ``true``, an ``error`` output...)
    into the input ``into`` of ``target``; either left out means the default handle."""
    found: dict[str, Any] = {"id": f"{source}.{out}->{target}", "source": source, "target": target}
    if out is not None:
        found["sourceHandle"] = out
    if into is not None:
        found["targetHandle"] = into
    return found


def g(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": nodes, "edges": edges, "viewport": {"x": 0, "y": 0, "zoom": 1}}


async def assert_graph_refused(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], pointer: str, words: str
) -> None:
    """A workflow made of ``graph`` is refused (400 ``invalid_graph``) with an error at
    ``pointer`` whose message says ``words``."""
    r = await client.post(
        "/api/v1/workflows", json={"name": "x", "graph_json": graph}, headers=user.headers
    )
    errors = assert_problem(r, 400, "invalid_graph")["errors"]
    assert isinstance(errors, list)
    assert any(err["pointer"] == pointer and words in err["message"] for err in errors), errors


async def assert_kept_never_run(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], left_out: str, ran: set[str]
) -> dict[str, Any]:
    """A workflow of ``graph`` is saved as sent and without warnings; node ``left_out`` (a
    note, a group: on the canvas only) is in neither its estimate nor its run, which
    completes running exactly ``ran``, charged its estimate. The workflow as read back."""
    wf = await create_workflow(client, user, graph)
    r = await client.get(f"/api/v1/workflows/{wf}", headers=user.headers)
    saved: dict[str, Any] = r.json()
    assert saved["graph_json"] == graph
    assert saved.get("warnings", []) == []
    r = await client.post(f"/api/v1/workflows/{wf}/estimate", json={}, headers=user.headers)
    assert r.status_code == 200, r.text
    assert left_out not in r.text
    r = await execute(client, user, wf, {"cache": False})
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, user, wf, r.json()["run_id"])
    assert run["status"] == "completed", run
    assert {nr["node_id"] for nr in run["node_runs"]} == ran
    assert run["credits_used"] == r.json()["estimated_credits"]
    return saved


# A run that fails part-way, for retries: "a" and "side" complete (1 credit each), "bad"
# fails and skips "after".
FAILS_PART_WAY = g(
    [
        n("in", "TextInput", text="x"),
        n("a", "TextTemplate", template="A {{ text }}"),
        n("bad", "TextTemplate", template="{{ 1 / 0 }}"),
        n("after", "TextTemplate", template="{{ text }}!"),
        n("side", "TextTemplate", template="side {{ text }}"),
    ],
    [e("in", "a"), e("a", "bad"), e("bad", "after"), e("in", "side")],
)
