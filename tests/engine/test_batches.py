"""Batches at the engine (engine/batches.py, engine/items.py), on SQLite (a driver) and
PostgreSQL (queue workers): the rows a ForEach expands into, one item failing on its own,
fail_fast, a cancel in the middle of the items, and what is charged for each."""

from __future__ import annotations

from typing import Any

import pytest

from nodeloom.engine.batches import expand, instance_id
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.nodes.registry import build_registry
from nodeloom.settings import Settings
from nodeloom.store import Record
from tests.engine.accepting import Engine, assert_balanced, engine
from tests.runs_helpers import e, g, n

__all__ = ["engine"]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def words_batch(*, fail_fast: bool = False, concurrency: int = 3) -> dict[str, Any]:
    """in -> each -> word (the second word of the line: fails on a line of one word) ->
    tpl (1 credit an item) -> all (Collect)."""
    return g(
        [
            n("in", "TextInput"),
            n("each", "ForEach", concurrency=concurrency, fail_fast=fail_fast),
            n("word", "TextSplit", separator=" ", index=1),
            n("tpl", "TextTemplate", template="<{{ text }}>"),
            n("all", "Collect"),
        ],
        [e("in", "each"), e("each", "word"), e("word", "tpl"), e("tpl", "all")],
    )


def instances(nodes: dict[str, Record], drawn: str) -> list[Record]:
    """The rows of a drawn region node's instances, in item order."""
    found = [row for node_id, row in nodes.items() if node_id.startswith(drawn + "#")]
    return sorted(found, key=lambda row: row.item_index)


class TestExpansion:
    def test_each_item_gets_its_own_instances_wired_like_the_drawn_nodes(self) -> None:
        settings = Settings(secret_key="batches-" + "x" * 40)
        graph = validate_graph(words_batch(), build_registry(), settings)
        assert not isinstance(graph, list), graph
        expanded = expand(graph, {"each": 2})
        assert instance_id("word", 1) == "word#1"
        for k in range(2):
            assert expanded.batches.instances[f"tpl#{k}"] == ("tpl", k, 2)
            assert expanded.inputs[f"word#{k}"] == {"text": [f"each#{k}"]}
            assert expanded.inputs[f"tpl#{k}"] == {"text": [f"word#{k}"]}
        # The collector takes the items' instances in item order.
        assert [s for srcs in expanded.inputs["all"].values() for s in srcs] == ["tpl#0", "tpl#1"]


class TestItems:
    async def test_one_item_failing_fails_only_that_item_and_is_not_charged(
        self, engine: Engine
    ) -> None:
        wf = await engine.workflow(words_batch())
        run_id = await engine.accept(wf, {"text": "a one\nlonely\nb two"})
        run = await engine.wait(run_id)
        assert run.status == "completed", run.error
        nodes = await engine.nodes(run_id)
        assert [r.status for r in instances(nodes, "word")] == ["completed", "failed", "completed"]
        assert [r.item_index for r in instances(nodes, "word")] == [0, 1, 2]
        assert [r.status for r in instances(nodes, "tpl")] == ["completed", "skipped", "completed"]
        assert nodes["all"].status == "completed" and nodes["each"].status == "completed"
        ledger = await engine.ledger(run_id)
        charges = {node for (node, kind) in ledger if kind == "charge"}
        assert charges == {"tpl#0", "tpl#2"}
        assert assert_balanced(ledger) == run.credits_used == 2
        assert await engine.balance() == 1000 - 2

    async def test_fail_fast_fails_the_run_and_starts_no_item_after_the_failure(
        self, engine: Engine
    ) -> None:
        wf = await engine.workflow(words_batch(fail_fast=True, concurrency=1))
        lines = ["lonely"] + [f"w {i}" for i in range(6)]
        run_id = await engine.accept(wf, {"text": "\n".join(lines)})
        run = await engine.wait(run_id)
        assert run.status == "failed" and run.error["node_id"] == "word", run.error
        nodes = await engine.nodes(run_id)
        words = instances(nodes, "word")
        assert words[0].status == "failed"
        # One item at a time, the first failing: no later item ever started.
        assert all(r.started_at is None for r in words[1:]), [r.status for r in words]
        assert nodes["all"].status == "skipped"
        ledger = await engine.ledger(run_id)
        assert assert_balanced(ledger) == run.credits_used == 0

    async def test_a_cancel_stops_the_items_not_finished_and_charges_those_that_did(
        self, engine: Engine
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("each", "ForEach", concurrency=1),
                n("wait", "Delay", seconds=0.3),
                n("tpl", "TextTemplate", template="{{ text }}!"),
                n("all", "Collect"),
            ],
            [e("in", "each"), e("each", "wait"), e("wait", "tpl"), e("tpl", "all")],
        )
        wf = await engine.workflow(graph)
        run_id = await engine.accept(wf, {"text": "\n".join("abcdefgh")})

        def one_item_done(_: Record, nodes: dict[str, Record]) -> bool:
            return any(r.status == "completed" for r in instances(nodes, "tpl"))

        await engine.until(run_id, one_item_done)
        await engine.cancel(run_id)
        run = await engine.wait(run_id)
        assert run.status == "cancelled"
        nodes = await engine.nodes(run_id)
        statuses = {r.status for r in nodes.values()}
        assert not statuses & {"running", "queued", "pending"}, statuses
        assert "cancelled" in {r.status for r in instances(nodes, "wait")}
        assert nodes["all"].status == "cancelled"
        done = [r.node_id for r in instances(nodes, "tpl") if r.status == "completed"]
        assert done and len(done) < 8
        ledger = await engine.ledger(run_id)
        assert {node for (node, kind) in ledger if kind == "charge"} == set(done)
        assert assert_balanced(ledger) == run.credits_used == len(done)
        assert await engine.balance() == 1000 - len(done)
