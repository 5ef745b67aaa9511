"""Every event the server sends matches its published model (``RunEventMessage`` in the
OpenAPI document), for each way a run and its nodes can end."""

from __future__ import annotations

from typing import Any

import httpx

from nodeloom.client._runs import RunEvent, apply_event, diff_events
from nodeloom.events.model import EventType
from nodeloom.schemas.events import MESSAGE
from nodeloom.schemas.runs import RunOut
from tests.events.conftest import (
    Live,
    create_workflow,
    delay_graph,
    execute,
    quick_graph,
    wait_running,
)
from tests.events.test_sse import stream


def _failing_graph() -> dict[str, Any]:
    # The template divides by zero when it renders: it fails, and the node after it is skipped.
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
            {
                "id": "bad",
                "type": "TextTemplate",
                "position": {"x": 1, "y": 0},
                "data": {"template": "{{ (text | length) // 0 }}"},
            },
            {"id": "after", "type": "TextTemplate", "position": {"x": 2, "y": 0}, "data": {}},
        ],
        "edges": [
            {"id": "a", "source": "in", "target": "bad"},
            {"id": "b", "source": "bad", "target": "after"},
        ],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }


def _gated_graph() -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
            {
                "id": "gate",
                "type": "Approval",
                "position": {"x": 1, "y": 0},
                "data": {"timeout_seconds": 1, "timeout_outcome": "approve"},
            },
        ],
        "edges": [{"id": "a", "source": "in", "target": "gate"}],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }


async def _events_of(http: httpx.AsyncClient, wf: str, run_id: str) -> list[dict[str, Any]]:
    _, frames = await stream(http, wf, run_id)
    return [frame["data"] for frame in frames]


async def test_every_event_kind_matches_its_model(live: Live) -> None:
    seen: set[str] = set()
    async with live.http() as http:
        quick = await create_workflow(http, quick_graph())
        runs = [(quick, await execute(http, quick)), (quick, await execute(http, quick))]
        failing = await create_workflow(http, _failing_graph())
        runs.append((failing, await execute(http, failing)))
        slow = await create_workflow(http, delay_graph(2))
        runs.append((slow, await execute(http, slow)))
        cancelled = await execute(http, slow)
        await wait_running(http, slow, cancelled, "d")
        r = await http.post(f"/api/v1/workflows/{slow}/runs/{cancelled}/cancel")
        assert r.status_code == 202
        runs.append((slow, cancelled))
        # Waits for a person (node.waiting) for a second, then the timeout decides.
        gated = await create_workflow(http, _gated_graph())
        runs.append((gated, await execute(http, gated)))
        for wf, run_id in runs:
            for event in await _events_of(http, wf, run_id):
                MESSAGE.validate_python(event)  # raises on any field out of its model
                seen.add(event["type"])
        document = (await http.get("/api/v1/openapi.json")).json()
    assert seen == {t.value for t in EventType}, seen
    schemas = document["components"]["schemas"]
    assert schemas["EventType"]["enum"] == [t.value for t in EventType]
    assert "RunEventMessage" in schemas


async def test_events_folded_onto_a_run_give_its_final_record(live: Live) -> None:
    """The client's one event-to-state function, and its inverse: the events of a run folded
    onto its first record give its last, and so do the events derived between the two."""
    async with live.http() as http:
        for graph in (_failing_graph(), delay_graph(1)):
            wf = await create_workflow(http, graph)
            run_id = await execute(http, wf)
            path = f"/api/v1/workflows/{wf}/runs/{run_id}"
            first = RunOut.model_validate((await http.get(path)).json())
            events = [RunEvent.model_validate(e) for e in await _events_of(http, wf, run_id)]
            last = RunOut.model_validate((await http.get(path)).json())
            for derived in (False, True):
                state = first.model_copy(deep=True)
                for event in diff_events(first, last) if derived else events:
                    apply_event(state, event)
                assert state.status == last.status and state.error == last.error
                assert state.credits_used == last.credits_used
                assert [
                    (n.node_id, n.status, n.artifact_id, n.credits_used, n.cached, n.error)
                    for n in state.node_runs
                ] == [
                    (n.node_id, n.status, n.artifact_id, n.credits_used, n.cached, n.error)
                    for n in last.node_runs
                ]
