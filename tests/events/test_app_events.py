"""A visitor's run of a workflow app as Server-Sent Events, over a real server: the trimmed
record each time it changes until the run ends; an unpublished or deleted app ends an open
stream at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.events.conftest import Live, create_workflow, delay_graph
from tests.events.test_sse import parse_sse


async def publish(http: httpx.AsyncClient, workflow_id: str) -> dict[str, Any]:
    r = await http.post(
        "/api/v1/apps",
        json={"workflow_id": workflow_id, "title": "Slow", "outputs": [{"node_id": "tpl"}]},
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def start(visitor: httpx.AsyncClient, slug: str) -> dict[str, Any]:
    r = await visitor.post(f"/api/v1/public/apps/{slug}/runs", json={"input": {"text": "hey"}})
    assert r.status_code == 202, r.text
    return dict(r.json())


class TestVisitorStream:
    async def test_streams_the_trimmed_record_until_the_run_ends(self, live: Live) -> None:
        async with live.http() as http, httpx.AsyncClient(base_url=live.base_url) as visitor:
            app = await publish(http, await create_workflow(http, delay_graph(1)))
            run = await start(visitor, app["slug"])
            path = f"/api/v1/public/apps/{app['slug']}/runs/{run['run_id']}/events"
            async with visitor.stream(
                "GET", path, params={"token": run["visitor_token"]}, timeout=20
            ) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                frames = parse_sse((await r.aread()).decode())
            assert {f["event"] for f in frames} == {"run"}
            records = [f["data"] for f in frames]
            assert records[0]["status"] == "running"
            assert records[-1]["status"] == "completed"
            assert records[-1]["outputs"][0]["text"] == "hey!"
            assert all(set(rec) >= {"progress", "outputs"} for rec in records)
            assert "node_runs" not in frames[0]["data"]
            # Without the run's token: 404, as for an unknown run.
            r = await visitor.get(path)
            assert r.status_code == 404

    async def test_unpublishing_ends_an_open_stream_at_once(self, live: Live) -> None:
        async with live.http() as http, httpx.AsyncClient(base_url=live.base_url) as visitor:
            wf = await create_workflow(http, delay_graph(60))
            app = await publish(http, wf)
            run = await start(visitor, app["slug"])
            first_run = run["run_id"]
            path = f"/api/v1/public/apps/{app['slug']}/runs/{run['run_id']}/events"
            async with visitor.stream(
                "GET", path, params={"token": run["visitor_token"]}, timeout=30
            ) as r:
                assert r.status_code == 200
                lines = r.aiter_lines()
                first = await anext(lines)
                assert first == "event: run"
                r2 = await http.patch(f"/api/v1/apps/{app['id']}", json={"published": False})
                assert r2.status_code == 200
                unpublished = time.monotonic()
                rest = [line async for line in lines]
                closed_after = time.monotonic() - unpublished
            assert "event: closed" in rest
            assert closed_after < 5  # the signal, not the periodic look (every 10 s)
            # Deleting works the same way, for an app published again.
            await http.patch(f"/api/v1/apps/{app['id']}", json={"published": True})
            run = await start(visitor, app["slug"])
            path = f"/api/v1/public/apps/{app['slug']}/runs/{run['run_id']}/events"
            async with visitor.stream(
                "GET", path, params={"token": run["visitor_token"]}, timeout=30
            ) as r:
                lines = r.aiter_lines()
                assert await anext(lines) == "event: run"
                deleting = asyncio.create_task(http.delete(f"/api/v1/apps/{app['id']}"))
                rest = [line async for line in lines]
                assert (await deleting).status_code == 204
            assert "event: closed" in rest
            for run_id in (first_run, run["run_id"]):  # the owner's runs go on: stop them
                await http.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel")
