"""Run events over a real server and a real WebSocket client: replay, live order, races with the
run, workflow subscriptions, authentication and isolation between accounts."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.events.conftest import (
    Live,
    assert_contiguous,
    create_workflow,
    delay_graph,
    events_until_final,
    execute,
    quick_graph,
    recv,
    send,
    subscribe,
    wait_finished,
)

EVENT_KEYS = {"type", "seq", "ts", "run_id", "workflow_id", "data"}


class TestReplay:
    async def test_finished_run_is_replayed_in_full(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, quick_graph())
            run_id = await execute(http, wf)
            await wait_finished(http, wf, run_id)
        async with live.connect() as ws:
            assert await subscribe(ws, run_id=run_id) == {"type": "subscribed", "run_id": run_id}
            events = (await events_until_final(ws, {run_id}))[run_id]
        assert_contiguous(events)
        assert [m["type"] for m in events] == [
            "run.started",
            "node.started",
            "node.completed",
            "node.started",
            "node.completed",
            "run.completed",
        ]
        for m in events:
            assert set(m) in (EVENT_KEYS, EVENT_KEYS | {"node_id"}), m
            assert m["run_id"] == run_id and m["workflow_id"] == wf
            assert m["ts"].endswith("Z") and len(m["ts"]) == len("2026-11-22T06:00:00.123Z")
            assert ("node_id" in m) == m["type"].startswith("node.")
        completed = [m for m in events if m["type"] == "node.completed"]
        assert [m["node_id"] for m in completed] == ["in", "tpl"]
        for m in completed:
            assert set(m["data"]) >= {"artifact_id", "credits_used", "cached"}

    async def test_after_seq_replays_only_later_events(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, quick_graph())
            run_id = await execute(http, wf)
            await wait_finished(http, wf, run_id)
        async with live.connect() as ws:
            await subscribe(ws, run_id=run_id, after_seq=4)  # type: ignore[arg-type]
            events = (await events_until_final(ws, {run_id}))[run_id]
        assert [m["seq"] for m in events] == [5, 6]


class TestLive:
    async def test_delay_run_arrives_in_order_with_progress(self, live: Live) -> None:
        async with live.http() as http, live.connect() as ws:
            wf = await create_workflow(http, delay_graph(2))
            run_id = await execute(http, wf)
            await subscribe(ws, run_id=run_id)
            events = (await events_until_final(ws, {run_id}, timeout=10))[run_id]
        assert_contiguous(events)
        steps = [(m["type"], m.get("node_id")) for m in events if m["type"] != "node.progress"]
        assert steps == [
            ("run.started", None),
            ("node.started", "in"),
            ("node.completed", "in"),
            ("node.started", "d"),
            ("node.completed", "d"),
            ("node.started", "tpl"),
            ("node.completed", "tpl"),
            ("run.completed", None),
        ]
        types = [m["type"] for m in events]
        progress = [m for m in events if m["type"] == "node.progress"]
        assert progress, types
        first, last = types.index("node.started", 3), types.index("node.completed", 3)
        for m in progress:
            assert m["node_id"] == "d" and 0 < m["data"]["progress"] <= 1
            assert first < events.index(m) < last

    async def test_subscribing_during_the_run_loses_and_repeats_nothing(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, delay_graph(1))
            run_id = await execute(http, wf)

            async def late_subscriber(delay: float) -> list[dict[str, Any]]:
                await asyncio.sleep(delay)
                async with live.connect() as ws:
                    await subscribe(ws, run_id=run_id)
                    return (await events_until_final(ws, {run_id}))[run_id]

            results = await asyncio.gather(*(late_subscriber(i * 0.07) for i in range(18)))
        reference = results[-1]
        for events in results:
            assert_contiguous(events)
            assert events == reference

    async def test_workflow_subscription_gets_runs_started_afterwards(self, live: Live) -> None:
        async with live.http() as http, live.connect() as ws:
            wf = await create_workflow(http, quick_graph())
            assert await subscribe(ws, workflow_id=wf) == {"type": "subscribed", "workflow_id": wf}
            run_ids = {await execute(http, wf) for _ in range(3)}
            by_run = await events_until_final(ws, run_ids)
        assert set(by_run) == run_ids
        for events in by_run.values():
            assert_contiguous(events)
            assert len(events) == 6

    async def test_unsubscribe_stops_delivery(self, live: Live) -> None:
        async with live.http() as http, live.connect() as ws:
            wf = await create_workflow(http, quick_graph())
            await subscribe(ws, workflow_id=wf)
            await send(ws, {"type": "unsubscribe", "workflow_id": wf})
            assert await recv(ws) == {"type": "unsubscribed", "workflow_id": wf}
            run_id = await execute(http, wf)
            await wait_finished(http, wf, run_id)
            await send(ws, {"type": "ping"})
            assert await recv(ws) == {"type": "pong"}  # and no event came before it


class TestAuthentication:
    @pytest.mark.parametrize("token", [None, "nlk_not-a-real-key", "not.a.jwt"])
    async def test_bad_or_missing_credential_closes_with_4401(
        self, live: Live, token: str | None
    ) -> None:
        url = live.ws_url + (f"?token={token}" if token else "")
        async with connect(url, open_timeout=5) as ws:  # accepted, then closed
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401

    async def test_bad_header_closes_with_4401(self, live: Live) -> None:
        headers = {"Authorization": "Bearer nlk_revoked-or-made-up"}
        async with connect(live.ws_url, additional_headers=headers, open_timeout=5) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401

    @pytest.mark.parametrize("kind", ["api_key", "jwt"])
    async def test_token_query_parameter_works(self, live: Live, kind: str) -> None:
        token = live.owner.api_key if kind == "api_key" else live.owner.jwt
        async with connect(f"{live.ws_url}?token={token}", open_timeout=5) as ws:
            await send(ws, {"type": "ping"})
            assert await recv(ws) == {"type": "pong"}

    async def test_plain_http_is_not_a_websocket(self, live: Live) -> None:
        with pytest.raises(InvalidStatus):
            async with connect(live.ws_url.replace("/ws", "/nope"), open_timeout=5):
                pass


class TestIsolationAndErrors:
    async def test_other_accounts_run_and_workflow_are_not_found(self, live: Live) -> None:
        async with live.http() as http:
            wf = await create_workflow(http, quick_graph())
            run_id = await execute(http, wf)
            await wait_finished(http, wf, run_id)
        async with live.connect(live.other) as ws:
            answer = await subscribe(ws, run_id=run_id)
            assert answer["type"] == "error" and answer["code"] == "not_found"
            assert answer["run_id"] == run_id
            answer = await subscribe(ws, workflow_id=wf)
            assert answer["code"] == "not_found" and answer["workflow_id"] == wf
            answer = await subscribe(ws, run_id=str(uuid.uuid4()))
            assert answer["code"] == "not_found"
            await send(ws, {"type": "ping"})  # the socket stays open, and nothing leaked
            assert await recv(ws) == {"type": "pong"}

    @pytest.mark.parametrize(
        "raw",
        [
            "not json",
            "[1, 2]",
            '{"type": "dance"}',
            '{"no": "type"}',
            '{"type": "subscribe"}',
            '{"type": "subscribe", "run_id": 5}',
            '{"type": "subscribe", "run_id": "a", "workflow_id": "b"}',
            '{"type": "subscribe", "run_id": "a", "after_seq": -1}',
        ],
    )
    async def test_malformed_messages_answer_invalid_request(self, live: Live, raw: str) -> None:
        async with live.connect() as ws:
            await ws.send(raw)
            answer = await recv(ws)
            assert answer["type"] == "error" and answer["code"] == "invalid_request"
            assert answer["detail"]
            await ws.send(b"\x00binary")
            assert (await recv(ws))["code"] == "invalid_request"
            await send(ws, {"type": "ping"})
            assert await recv(ws) == {"type": "pong"}
