"""Batches over HTTP: a ForEach runs the nodes after it once per item, a Collect gathers the
items' outputs; on SQLite (in-process driver) and PostgreSQL (queue workers) alike."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000, "batch_max_items": 50}


def batch_graph(
    *, fail_fast: bool = False, pick_word: bool = False, concurrency: int = 3, **for_each: Any
) -> dict[str, Any]:
    """in -> each -> [split ->] tpl (1 credit an item) -> all (Collect)."""
    nodes = [
        n("in", "TextInput"),
        n("each", "ForEach", concurrency=concurrency, fail_fast=fail_fast, **for_each),
        n("tpl", "TextTemplate", template="<{{ text }}>"),
        n("all", "Collect"),
    ]
    edges = [e("in", "each"), e("tpl", "all")]
    if pick_word:
        # The second word of each item: an item of one word fails here.
        nodes.append(n("word", "TextSplit", separator=" ", index=1))
        edges += [e("each", "word"), e("word", "tpl")]
    else:
        edges.append(e("each", "tpl"))
    return g(nodes, edges)


async def run_batch(
    client: httpx.AsyncClient, user: User, wf: str, text: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    r = await execute(client, user, wf, {"input": {"text": text}})
    assert r.status_code == 202, r.text
    return r.json(), await wait_for_run(client, user, wf, r.json()["run_id"], timeout=60)


async def text_of(client: httpx.AsyncClient, user: User, artifact_id: str) -> str:
    r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=user.headers)
    assert r.status_code == 200, r.text
    return r.text


def of(run: dict[str, Any], node_id: str) -> list[dict[str, Any]]:
    return [nr for nr in run["node_runs"] if nr["node_id"] == node_id]


class TestFanOut:
    async def test_each_line_runs_once_and_collect_keeps_order(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, batch_graph())
        lines = [f"line {i}" for i in range(12)]
        before = await balance(client, owner)
        accepted, run = await run_batch(client, owner, wf, "\n".join(lines) + "\n\n")
        # The count is known from the input: 12 items of 1 credit are held, not the cap.
        assert accepted["estimated_credits"] == 12
        assert run["status"] == "completed", run
        tpl = of(run, "tpl")
        assert [nr["item_index"] for nr in tpl] == list(range(12))
        assert all(nr["status"] == "completed" and nr["credits_used"] == 1 for nr in tpl)
        [each] = [nr for nr in of(run, "each") if nr["item_index"] is None]
        assert each["status"] == "completed"
        assert [nr["item_index"] for nr in of(run, "each") if nr["item_index"] is not None] == list(
            range(12)
        )
        [collect] = of(run, "all")
        assert collect["item_index"] is None
        assert json.loads(await text_of(client, owner, collect["artifact_id"])) == [
            f"<{line}>" for line in lines
        ]
        # One item's artifact opens on its own.
        assert await text_of(client, owner, tpl[7]["artifact_id"]) == "<line 7>"
        assert run["credits_used"] == 12
        assert await balance(client, owner) == before - 12

    async def test_json_array_items(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(client, owner, batch_graph(split="json"))
        _, run = await run_batch(client, owner, wf, json.dumps(["a", {"b": 1}, 3]))
        assert run["status"] == "completed", run
        [collect] = of(run, "all")
        assert json.loads(await text_of(client, owner, collect["artifact_id"])) == [
            "<a>",
            '<{"b": 1}>',
            "<3>",
        ]

    async def test_empty_list_collects_an_empty_array(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, batch_graph(split="json"))
        accepted, run = await run_batch(client, owner, wf, "[]")
        assert accepted["estimated_credits"] == 0
        assert run["status"] == "completed", run
        assert of(run, "tpl") == []
        [collect] = of(run, "all")
        assert await text_of(client, owner, collect["artifact_id"]) == "[]"

    async def test_unknown_count_holds_the_bound_and_charges_what_ran(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # A template between the input and the ForEach: the count is known only when it runs.
        graph = batch_graph(max_items=20)
        graph["nodes"].append(n("pre", "TextTemplate", template="{{ text }}"))
        graph["edges"] = [ed for ed in graph["edges"] if ed["source"] != "in"]
        graph["edges"] += [e("in", "pre"), e("pre", "each")]
        wf = await create_workflow(client, owner, graph)
        before = await balance(client, owner)
        accepted, run = await run_batch(client, owner, wf, "a\nb\nc")
        assert accepted["estimated_credits"] == 1 + 20  # pre, and 20 items at most
        assert run["status"] == "completed", run
        assert run["credits_used"] == 1 + 3
        assert await balance(client, owner) == before - 4

    async def test_item_entries_carry_the_item_count(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # A poller shows "3/5" from the run record alone, as a watcher does from events.
        wf = await create_workflow(client, owner, batch_graph())
        _, run = await run_batch(client, owner, wf, "a\nb\nc\nd\ne")
        assert run["status"] == "completed", run
        for nr in run["node_runs"]:
            expected = 5 if nr["item_index"] is not None else None
            assert nr["item_count"] == expected, nr
        done = sum(1 for nr in of(run, "tpl") if nr["status"] == "completed")
        assert (done, of(run, "tpl")[0]["item_count"]) == (5, 5)

    async def test_item_events_carry_the_item_index(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, batch_graph())
        accepted, _ = await run_batch(client, owner, wf, "x\ny\nz")
        # The run has ended: its event stream replays the log and closes.
        async with client.stream(
            "GET", f"/api/v1/workflows/{wf}/runs/{accepted['run_id']}/events", headers=owner.headers
        ) as r:
            assert r.status_code == 200
            body = (await r.aread()).decode()
        events = [
            json.loads(line[len("data: ") :])
            for line in body.splitlines()
            if line.startswith("data: ")
        ]
        done = [
            ev["data"]["item_index"]
            for ev in events
            if ev["type"] == "node.completed" and ev.get("node_id") == "tpl"
        ]
        assert sorted(done) == [0, 1, 2]


class TestEstimate:
    """``/estimate`` answers what execute would hold, item count included."""

    async def test_estimate_counts_the_items_execute_holds(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = batch_graph()
        graph["nodes"][0]["data"]["text"] = "a\nb\nc\nd\ne"  # 5 lines of its own
        wf = await create_workflow(client, owner, graph)
        url = f"/api/v1/workflows/{wf}/estimate"
        # No input: the TextInput's own 5 lines, as execute without an input holds.
        r = await client.get(url, headers=owner.headers)
        assert r.status_code == 200, r.text
        assert r.json()["estimated_credits"] == 5
        r = await client.post(url, headers=owner.headers)
        assert r.json()["estimated_credits"] == 5
        accepted = await execute(client, owner, wf)
        assert accepted.json()["estimated_credits"] == 5
        # With an input: its count, the same as execute's with that input.
        body = {"input": {"text": "x\ny\nz"}}
        r = await client.post(url, json=body, headers=owner.headers)
        assert r.status_code == 200, r.text
        estimate = r.json()
        assert estimate["estimated_credits"] == 3
        # Each node's part adds up to the total: the region's node holds 3 items.
        parts = {p["node_id"]: p["credits"] for p in estimate["nodes"]}
        assert parts["tpl"] == 3 and sum(parts.values()) == 3
        accepted = await execute(client, owner, wf, body)
        assert accepted.json()["estimated_credits"] == 3
        run = await wait_for_run(client, owner, wf, accepted.json()["run_id"])
        assert run["credits_used"] == 3

    async def test_estimate_refuses_an_input_execute_refuses(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, batch_graph())
        body = {"input": {"text": "\n".join(str(i) for i in range(51))}}  # the cap is 50
        r = await execute(client, owner, wf, body)
        assert_problem(r, 400, "invalid_request")
        r = await client.post(f"/api/v1/workflows/{wf}/estimate", json=body, headers=owner.headers)
        assert_problem(r, 400, "invalid_request")
        assert r.json()["errors"][0]["pointer"] == "/input"


class TestConcurrency:
    async def test_at_most_concurrency_items_run_at_once(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("each", "ForEach", concurrency=2),
                n("wait", "Delay", seconds=0.3),
                n("all", "Collect"),
            ],
            [e("in", "each"), e("each", "wait"), e("wait", "all")],
        )
        wf = await create_workflow(client, owner, graph)
        _, run = await run_batch(client, owner, wf, "\n".join("abcdef"))
        assert run["status"] == "completed", run
        waits = of(run, "wait")
        assert len(waits) == 6
        spans = [(nr["started_at"], nr["finished_at"]) for nr in waits]
        # At any item's start, fewer than 2 others were running.
        for start, _ in spans:
            overlapping = sum(1 for s, f in spans if s < start < f)
            assert overlapping <= 1, spans
        # And the bound was used: some two ran together.
        assert any(s1 < s2 < f1 for s1, f1 in spans for s2, _ in spans), spans


def delay_batch(concurrency: int, seconds: float) -> dict[str, Any]:
    """in -> each -> wait (a Delay per item) -> all (Collect)."""
    return g(
        [
            n("in", "TextInput"),
            n("each", "ForEach", concurrency=concurrency),
            n("wait", "Delay", seconds=seconds),
            n("all", "Collect"),
        ],
        [e("in", "each"), e("each", "wait"), e("wait", "all")],
    )


def most_at_once(spans: list[tuple[str, str]]) -> int:
    """The most spans (started_at, finished_at) running at one moment."""
    return max(
        1 + sum(1 for j, (s, f) in enumerate(spans) if j != i and s <= start < f)
        for i, (start, _) in enumerate(spans)
    )


async def run_of(client: httpx.AsyncClient, user: User, wf: str, run_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=user.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


class TestItemsInFlightPerAccount:
    """``batch_items_in_flight_per_account`` bounds one account's items over all its runs."""

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {
            "rate_limit_api_key": 100_000,
            "rate_limit_jwt": 100_000,
            "batch_items_in_flight_per_account": 3,
        }

    async def test_two_runs_share_the_cap_and_both_complete(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        # Each run alone would run 3 items at once: together they may run only 3.
        # Items of 1.5 s: the owner's 10 take about 5 s at 3 at once, time enough on a busy
        # machine for the other account's run to be accepted and started among them.
        wf = await create_workflow(client, owner, delay_batch(concurrency=3, seconds=1.5))
        ids = []
        for _ in range(2):
            r = await execute(client, owner, wf, {"input": {"text": "\n".join("abcde")}})
            assert r.status_code == 202, r.text
            ids.append(r.json()["run_id"])
        # While the account is at its cap, another account's batch is not held by it.
        theirs = await create_workflow(client, other, delay_batch(concurrency=3, seconds=1.5))
        seen: list[int] = []
        for _ in range(400):
            runs = [await run_of(client, owner, wf, run_id) for run_id in ids]
            busy = [
                nr
                for run in runs
                for nr in of(run, "wait")
                if nr["status"] in ("queued", "running")
            ]
            seen.append(len(busy))
            if any(nr["status"] == "running" for nr in busy) and len(busy) == 3:
                break
            await asyncio.sleep(0.02)
        assert seen[-1] == 3, seen
        r = await execute(client, other, theirs, {"input": {"text": "x\ny\nz"}})
        assert r.status_code == 202, r.text
        their_run = await wait_for_run(client, other, theirs, r.json()["run_id"], timeout=60)
        mine = [await wait_for_run(client, owner, wf, run_id, timeout=60) for run_id in ids]
        assert their_run["status"] == "completed", their_run
        assert [run["status"] for run in mine] == ["completed", "completed"], mine
        # Never more than 3 of the account's items at once, over both runs; the cap was used.
        spans = [(nr["started_at"], nr["finished_at"]) for run in mine for nr in of(run, "wait")]
        assert len(spans) == 10 and all(
            nr["status"] == "completed" for run in mine for nr in of(run, "wait")
        )
        assert most_at_once(spans) == 3, spans
        # The room is shared: neither run waited for all the other's items to start.
        starts = [sorted(nr["started_at"] for nr in of(run, "wait")) for run in mine]
        assert starts[0][0] < starts[1][-1] and starts[1][0] < starts[0][-1], starts
        # The other account's 3 items ran together, beside the owner's: more than the
        # owner's cap of 3 items ran at once over both accounts, so the owner's cap did
        # not hold them. (Not "exactly 3 of the owner's at their first start": on a busy
        # machine that instant can fall between one owner item's end and the next's start.)
        theirs_spans = [(nr["started_at"], nr["finished_at"]) for nr in of(their_run, "wait")]
        assert most_at_once(theirs_spans) == 3, theirs_spans
        assert most_at_once(spans + theirs_spans) > 3, (spans, theirs_spans)


class TestCancel:
    async def test_cancel_stops_the_items_not_finished(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("each", "ForEach", concurrency=1),
                n("wait", "Delay", seconds=0.5),
                n("all", "Collect"),
            ],
            [e("in", "each"), e("each", "wait"), e("wait", "all")],
        )
        wf = await create_workflow(client, owner, graph)
        r = await execute(client, owner, wf, {"input": {"text": "\n".join("abcdefgh")}})
        run_id = r.json()["run_id"]
        for _ in range(200):
            run = (
                await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=owner.headers)
            ).json()
            if any(nr["status"] == "running" for nr in of(run, "wait")):
                break
            await asyncio.sleep(0.05)
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert run["status"] == "cancelled", run
        statuses = [nr["status"] for nr in of(run, "wait")]
        assert "cancelled" in statuses and "running" not in statuses and "pending" not in statuses
        assert of(run, "all")[0]["status"] == "cancelled"


class TestFailures:
    async def test_one_item_failing_fails_only_that_item(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, batch_graph(pick_word=True))
        _, run = await run_batch(client, owner, wf, "a one\nlonely\nb two")
        assert run["status"] == "completed", run
        words = of(run, "word")
        assert [nr["status"] for nr in words] == ["completed", "failed", "completed"]
        assert [nr["status"] for nr in of(run, "tpl")] == ["completed", "skipped", "completed"]
        assert run["credits_used"] == 2
        [collect] = of(run, "all")
        assert collect["status"] == "completed"
        assert json.loads(await text_of(client, owner, collect["artifact_id"])) == [
            "<one>",
            None,
            "<two>",
        ]

    async def test_fail_fast_fails_the_run(self, client: httpx.AsyncClient, owner: User) -> None:
        wf = await create_workflow(
            client, owner, batch_graph(pick_word=True, fail_fast=True, concurrency=1)
        )
        lines = ["lonely"] + [f"w {i}" for i in range(8)]
        _, run = await run_batch(client, owner, wf, "\n".join(lines))
        assert run["status"] == "failed", run
        assert run["error"]["node_id"] == "word"
        statuses = [nr["status"] for nr in of(run, "tpl")]
        # No item starts after the failure; the collect never runs.
        assert statuses.count("completed") < len(lines) - 1
        assert of(run, "all")[0]["status"] == "skipped"

    async def test_batch_over_the_cap_is_a_400(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, batch_graph())
        before = await balance(client, owner)
        r = await execute(client, owner, wf, {"input": {"text": "\n".join(["x"] * 51)}})
        assert_problem(r, 400, "invalid_request")
        assert "51 items" in r.json()["detail"] and "50" in r.json()["detail"]
        r = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        assert r.json() == []
        assert await balance(client, owner) == before

    async def test_batch_found_over_the_cap_fails_the_node(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = batch_graph(max_items=5)
        graph["nodes"].append(n("pre", "TextTemplate", template="{{ text }}"))
        graph["edges"] = [ed for ed in graph["edges"] if ed["source"] != "in"]
        graph["edges"] += [e("in", "pre"), e("pre", "each")]
        wf = await create_workflow(client, owner, graph)
        _, run = await run_batch(client, owner, wf, "\n".join("abcdef"))
        assert run["status"] == "failed"
        [each] = of(run, "each")
        assert each["status"] == "failed" and each["error"]["code"] == "batch_too_large"
        assert "6 items" in each["error"]["message"]
        assert of(run, "all")[0]["status"] == "skipped"


class TestMedia:
    async def test_collect_images_into_a_grid(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("each", "ForEach"),
                n("card", "RenderText", width=64, height=32),
                n("grid", "CollectImages", columns=2, cell_width=40, cell_height=20, gap=2),
            ],
            [e("in", "each"), e("each", "card"), e("card", "grid")],
        )
        wf = await create_workflow(client, owner, graph)
        _, run = await run_batch(client, owner, wf, "one\ntwo\nthree")
        assert run["status"] == "completed", run
        cards = of(run, "card")
        assert [nr["item_index"] for nr in cards] == [0, 1, 2]
        [grid] = of(run, "grid")
        r = await client.get(
            f"/api/v1/artifacts/{grid['artifact_id']}/metadata", headers=owner.headers
        )
        meta = r.json()
        assert meta["content_type"] == "image/png"
        # Three cells, two columns: two rows.
        assert (meta["width"], meta["height"]) == (2 * 40 + 3 * 2, 2 * 20 + 3 * 2)
        r = await client.get(f"/api/v1/artifacts/{grid['artifact_id']}", headers=owner.headers)
        assert r.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert run["credits_used"] == sum(nr["credits_used"] for nr in run["node_runs"])


class TestCache:
    async def test_cache_hits_per_item(self, client: httpx.AsyncClient, owner: User) -> None:
        # TextTemplate's output may depend on the whole run input (its `input` variable), so
        # the item's node here is one whose output depends on the item alone.
        graph = batch_graph()
        graph["nodes"][2] = n("tpl", "TextTransform", operation="upper")
        wf = await create_workflow(client, owner, graph)
        _, first = await run_batch(client, owner, wf, "a\nb\nc")
        assert [nr["cached"] for nr in of(first, "tpl")] == [False, False, False]
        _, again = await run_batch(client, owner, wf, "a\nbb\nc")
        assert [nr["cached"] for nr in of(again, "tpl")] == [True, False, True]
        [collect] = of(again, "all")
        assert json.loads(await text_of(client, owner, collect["artifact_id"])) == [
            "A",
            "BB",
            "C",
        ]

    async def test_a_template_item_is_cached_when_the_list_comes_in_the_input(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # The template reads only its item (not `input`): changing one of five lines runs
        # and charges that item alone.
        wf = await create_workflow(client, owner, batch_graph())
        lines = ["a", "b", "c", "d", "e"]
        _, first = await run_batch(client, owner, wf, "\n".join(lines))
        assert first["credits_used"] == 5
        lines[2] = "changed"
        before = await balance(client, owner)
        _, again = await run_batch(client, owner, wf, "\n".join(lines))
        assert again["status"] == "completed", again
        assert [nr["cached"] for nr in of(again, "tpl")] == [True, True, False, True, True]
        assert again["credits_used"] == 1
        assert await balance(client, owner) == before - 1
        [collect] = of(again, "all")
        assert json.loads(await text_of(client, owner, collect["artifact_id"])) == [
            "<a>",
            "<b>",
            "<changed>",
            "<d>",
            "<e>",
        ]

    async def test_a_template_reading_the_input_is_not_reused_when_it_changes(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = batch_graph()
        graph["nodes"][2] = n("tpl", "TextTemplate", template="{{ input.tag }}:{{ text }}")
        wf = await create_workflow(client, owner, graph)
        for tag, cached in (("x", False), ("x", True), ("y", False)):
            r = await execute(client, owner, wf, {"input": {"text": "a\nb", "tag": tag}})
            run = await wait_for_run(client, owner, wf, r.json()["run_id"])
            assert [nr["cached"] for nr in of(run, "tpl")] == [cached, cached], (tag, run)
            [collect] = of(run, "all")
            assert json.loads(await text_of(client, owner, collect["artifact_id"])) == [
                f"{tag}:a",
                f"{tag}:b",
            ]

    async def test_a_text_input_is_keyed_by_what_it_reads(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [n("a", "TextInput", key="a"), n("tpl", "TextTemplate", template="[{{ text }}]")],
            [e("a", "tpl")],
        )
        wf = await create_workflow(client, owner, graph)
        runs = []
        for b in ("1", "2"):
            r = await execute(client, owner, wf, {"input": {"a": "same", "b": b}})
            runs.append(await wait_for_run(client, owner, wf, r.json()["run_id"]))
        # Only key b changed: neither node reads it, both are answered from the cache.
        assert [(nr["node_id"], nr["cached"]) for nr in runs[1]["node_runs"]] == [
            ("a", True),
            ("tpl", True),
        ]
        assert runs[1]["credits_used"] == 0


class TestValidation:
    async def test_collect_without_for_each(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g([n("in", "TextInput"), n("all", "Collect")], [e("in", "all")])
        r = await client.post(
            "/api/v1/workflows", json={"name": "x", "graph_json": graph}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_graph")
        assert any("ForEach" in err["message"] for err in r.json()["errors"])

    async def test_hash_in_node_ids_is_refused_with_a_for_each(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = batch_graph()
        graph["nodes"][2]["id"] = "tpl#1"
        for edge in graph["edges"]:
            for key in ("source", "target"):
                if edge[key] == "tpl":
                    edge[key] = "tpl#1"
        r = await client.post(
            "/api/v1/workflows", json={"name": "x", "graph_json": graph}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_graph")
        assert r.json()["errors"][0]["pointer"] == "/graph_json/nodes/2/id"

    async def test_nested_for_each_is_refused(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("outer", "ForEach"),
                n("inner", "ForEach"),
                n("all", "Collect"),
            ],
            [e("in", "outer"), e("outer", "inner"), e("inner", "all")],
        )
        r = await client.post(
            "/api/v1/workflows", json={"name": "x", "graph_json": graph}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_graph")
        assert any("two ForEach" in err["message"] for err in r.json()["errors"])

    async def test_region_nodes_may_take_a_shared_input(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # A node outside the region feeds every item the same artifact.
        graph = g(
            [
                n("in", "TextInput"),
                n("prefix", "TextInput", key="prefix"),
                n("each", "ForEach"),
                n("join", "TextJoin", separator=": "),
                n("all", "Collect"),
            ],
            [
                e("in", "each"),
                e("prefix", "join", "texts"),
                e("each", "join", "texts"),
                e("join", "all"),
            ],
        )
        wf = await create_workflow(client, owner, graph)
        r = await execute(client, owner, wf, {"input": {"text": "a\nb", "prefix": "P"}})
        run = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert run["status"] == "completed", run
        [collect] = of(run, "all")
        assert json.loads(await text_of(client, owner, collect["artifact_id"])) == ["P: a", "P: b"]
