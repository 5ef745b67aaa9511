"""The pure-ish parts: bus routing, replay-then-live cursors (on a real database), and the
client message parser."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.events import protocol
from nodeloom.events.bus import MemoryBus
from nodeloom.events.model import Event
from nodeloom.events.stream import RunCursors
from tests.conftest import User, text_graph
from tests.runs_helpers import create_workflow, execute, wait_for_run


def event(seq: int, run: str = "r1", workflow: str = "w1", account: str = "a1") -> Event:
    type_ = "run.completed" if seq == 99 else "node.started"
    return Event(type_, seq, datetime.now(UTC), run, workflow, account, "n")


class TestMemoryBus:
    async def test_routes_by_run_and_workflow_within_the_account(self) -> None:
        bus = MemoryBus()
        with bus.subscribe("a1") as by_run, bus.subscribe("a1") as by_wf, bus.subscribe("a2") as x:
            by_run.watch_run("r1")
            by_wf.watch_workflow("w1")
            x.watch_workflow("w1")  # same workflow id, other account: sees nothing
            await bus.publish([event(1), event(2, run="r2")])
            assert [e.seq for e in _drain(by_run)] == [1]
            assert [e.seq for e in _drain(by_wf)] == [1, 2]
            assert _drain(x) == []
            by_wf.unwatch_workflow("w1")
            await bus.publish([event(3)])
            assert _drain(by_wf) == [] and len(_drain(by_run)) == 1
        assert bus.subscriber_count == 0 and bus._by_key == {}

    async def test_overflow_never_blocks_and_marks_the_subscription(self) -> None:
        bus = MemoryBus(queue_size=2)
        with bus.subscribe("a1") as sub:
            sub.watch_run("r1")
            await bus.publish([event(i) for i in range(1, 6)])
            assert sub.overflowed and sub.dropped.is_set() and sub.queue.qsize() == 2

    def test_message_json_matches_the_spec_shape(self) -> None:
        message = event(1).as_message()
        assert list(message) == ["type", "seq", "ts", "run_id", "workflow_id", "node_id", "data"]
        no_node = Event("run.started", 1, datetime.now(UTC), "r", "w", "a").as_message()
        assert "node_id" not in no_node and "account_id" not in no_node


def _drain(sub: object) -> list[Event]:
    queue = sub.queue  # type: ignore[attr-defined]
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000}


class TestRunCursors:
    async def test_replay_dedup_and_gap_fill(
        self, app: FastAPI, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        await wait_for_run(client, owner, wf, run_id)
        db = app.state.ctx.db
        logged = await RunCursors(db).replay(run_id, wf, owner.id)
        assert [e.seq for e in logged] == [1, 2, 3, 4, 5, 6]

        cursors = RunCursors(db)
        partial = await cursors.replay(run_id, wf, owner.id, after_seq=2)
        assert [e.seq for e in partial] == [3, 4, 5, 6]
        assert await cursors.admit(logged[3]) == []  # already replayed
        assert await cursors.admit(logged[5]) == []  # finished runs drop late duplicates

        cursors = RunCursors(db)
        assert await cursors.admit(logged[0]) == [logged[0]]
        assert await cursors.admit(logged[0]) == []
        filled = await cursors.admit(logged[4])  # seq 5 after 1: 2..4 come from the log
        assert [e.seq for e in filled] == [2, 3, 4, 5, 6]
        assert filled[:3] == logged[1:4]
        assert await cursors.admit(logged[5]) == []


class TestProtocol:
    def test_parses_the_client_messages(self) -> None:
        assert protocol.parse('{"type": "ping"}') == protocol.Ping()
        assert protocol.parse('{"type": "subscribe", "run_id": "r"}') == protocol.Subscribe(
            "run", "r", 0
        )
        assert protocol.parse(
            '{"type": "subscribe", "run_id": "r", "after_seq": 3}'
        ) == protocol.Subscribe("run", "r", 3)
        assert protocol.parse(
            '{"type": "unsubscribe", "workflow_id": "w", "extra": 1}'
        ) == protocol.Unsubscribe("workflow", "w")

    @pytest.mark.parametrize(
        "raw",
        [
            None,
            "",
            "x" * 5000,
            "null",
            '{"type": "subscribe", "run_id": ""}',
            '{"type": "subscribe", "workflow_id": "w", "after_seq": 1}',
            '{"type": "subscribe", "run_id": "r", "after_seq": true}',
            '{"type": "unsubscribe"}',
            '{"type": "subscribe", "run_id": "r\\u0000"}',
            '{"type": "subscribe", "workflow_id": "' + "w" * 201 + '"}',
        ],
    )
    def test_rejects_malformed_messages(self, raw: str | None) -> None:
        with pytest.raises(protocol.BadMessage):
            protocol.parse(raw)
