"""Run events, the same stream as Server-Sent Events, over a real server."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.events.conftest import (
    Live,
    assert_contiguous,
    create_workflow,
    delay_graph,
    execute,
    quick_graph,
    wait_finished,
)


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Each frame as {id, event, data}; comment lines (keep-alives) are left out."""
    frames = []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if fields:
            fields["data"] = orjson.loads(fields["data"])
            frames.append(fields)
    return frames


async def stream(
    http: httpx.AsyncClient, wf: str, run_id: str, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    async with http.stream(
        "GET", f"/api/v1/workflows/{wf}/runs/{run_id}/events", headers=headers, timeout=10
    ) as r:
        body = (await r.aread()).decode()
    return r, parse_sse(body)


class TestSse:
    async def test_live_run_streams_every_event_then_ends(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, delay_graph(1))
            run_id = await execute(http, wf)
            r, frames = await stream(http, wf, run_id)  # returns only when the stream ends
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [f["data"] for f in frames]
        assert_contiguous(events)
        for frame in frames:
            assert frame["id"] == str(frame["data"]["seq"])
            assert frame["event"] == frame["data"]["type"]
            assert frame["data"]["run_id"] == run_id and frame["data"]["workflow_id"] == wf

    async def test_finished_run_replays_and_ends_at_once(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, quick_graph())
            run_id = await execute(http, wf)
            await wait_finished(http, wf, run_id)
            _, frames = await stream(http, wf, run_id)
            assert [f["data"]["seq"] for f in frames] == [1, 2, 3, 4, 5, 6]
            _, resumed = await stream(http, wf, run_id, {"Last-Event-ID": "4"})
            assert [f["data"]["seq"] for f in resumed] == [5, 6]
            assert resumed == frames[4:]
            _, past_end = await stream(http, wf, run_id, {"Last-Event-ID": "6"})
            assert past_end == []

    async def test_last_event_id_resumes_a_live_run(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, delay_graph(1))
            run_id = await execute(http, wf)
            _, frames = await stream(http, wf, run_id, {"Last-Event-ID": "2"})
        seqs = [f["data"]["seq"] for f in frames]
        assert seqs == list(range(3, len(seqs) + 3))
        assert frames[-1]["event"] == "run.completed"

    async def test_token_query_parameter_for_eventsource(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, quick_graph())
            run_id = await execute(http, wf)
        async with httpx.AsyncClient(base_url=live.base_url, timeout=10) as anonymous:
            url = f"/api/v1/workflows/{wf}/runs/{run_id}/events"
            r = await anonymous.get(url, params={"token": live.owner.jwt})
            assert r.status_code == 200
            assert [f["event"] for f in parse_sse(r.text)][-1] == "run.completed"
            r = await anonymous.get(url)
            assert r.status_code == 401
            assert r.headers["content-type"].startswith("application/problem+json")
            r = await anonymous.get(url, params={"token": "nlk_wrong"})
            assert r.status_code == 401

    async def test_other_account_and_wrong_workflow_are_404(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, quick_graph())
            other_wf = await create_workflow(http, quick_graph())
            run_id = await execute(http, wf)
            r = await http.get(f"/api/v1/workflows/{other_wf}/runs/{run_id}/events")
            assert r.status_code == 404 and r.json()["code"] == "not_found"
        async with live.http(live.other) as http:
            r = await http.get(f"/api/v1/workflows/{wf}/runs/{run_id}/events")
            assert r.status_code == 404 and r.json()["code"] == "not_found"

    @pytest.mark.parametrize("value", ["abc", "-1"])
    async def test_bad_last_event_id_is_400(self, live: Live, value: str) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, quick_graph())
            run_id = await execute(http, wf)
            r = await http.get(
                f"/api/v1/workflows/{wf}/runs/{run_id}/events", headers={"Last-Event-ID": value}
            )
        assert r.status_code == 400 and r.json()["code"] == "invalid_request"
