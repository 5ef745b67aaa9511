"""Quality-gate loops over HTTP, on SQLite (in-process driver) and PostgreSQL (queue
workers): a Repeat runs the nodes up to its Until again until the Until's condition holds
or max_iterations is reached; every iteration's node runs are in the run with their index,
only what ran is charged, the estimate holds max_iterations, a cancel stops the iteration
running, a failure inside an iteration fails the run unless an error output carries it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.api.test_auth import assert_problem
from tests.api.test_decisions import nodes_of, text_of
from tests.conftest import User
from tests.runs_helpers import balance, create_workflow, edge, execute, g, n, wait_for_run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000, "repeat_max_iterations": 10}


def loop(max_iterations: int = 5, until: dict[str, Any] | None = None) -> dict[str, Any]:
    """in -> rep -> grow (1 credit an iteration: adds an x) -> until; done -> good (1),
    exhausted -> bad (1). Each iteration starts from what the previous one's Until tested."""
    condition = until or {"operator": "contains", "value": "xx"}
    return g(
        [
            n("in", "TextInput"),
            n("rep", "Repeat", max_iterations=max_iterations),
            n("grow", "TextTemplate", template="{{ text }}x"),
            n("until", "Until", **condition),
            n("good", "TextTemplate", template="good: {{ text }}"),
            n("bad", "TextTemplate", template="bad: {{ text }}"),
        ],
        [
            edge("in", "rep"),
            edge("rep", "grow"),
            edge("grow", "until"),
            edge("until", "good", "done"),
            edge("until", "bad", "exhausted"),
        ],
    )


async def run(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], text: str = "a"
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    wf = await create_workflow(client, user, graph)
    r = await execute(client, user, wf, {"input": {"text": text}, "cache": False})
    assert r.status_code == 202, r.text
    return wf, r.json(), await wait_for_run(client, user, wf, r.json()["run_id"], timeout=60)


def iterations(body: dict[str, Any], node_id: str) -> dict[int, dict[str, Any]]:
    return {
        nr["item_index"]: nr
        for nr in body["node_runs"]
        if nr["node_id"] == node_id and nr["item_index"] is not None
    }


async def events_of(
    client: httpx.AsyncClient, user: User, wf: str, run_id: str
) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}/events", headers=user.headers)
    assert r.status_code == 200, r.text
    return [
        json.loads(line[len("data:") :]) for line in r.text.splitlines() if line.startswith("data:")
    ]


class TestLoop:
    async def test_the_condition_holds_at_iteration_2(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        before = await balance(client, owner)
        _, accepted, body = await run(client, owner, loop())
        # The estimate holds max_iterations of the region, and the dearer way after it.
        assert accepted["estimated_credits"] == 5 + 1
        assert body["status"] == "completed", body
        grow = iterations(body, "grow")
        assert sorted(grow) == [0, 1]
        assert all(nr["status"] == "completed" and nr["item_count"] == 2 for nr in grow.values())
        assert await text_of(client, owner, grow[0]["artifact_id"]) == "ax"
        # Iteration 2 started from the value iteration 1's Until tested.
        assert await text_of(client, owner, grow[1]["artifact_id"]) == "axx"
        checks = iterations(body, "until")
        assert [checks[k]["status"] for k in sorted(checks)] == ["completed", "completed"]
        nodes = nodes_of(body)
        assert nodes["until"]["status"] == "completed"
        assert nodes["good"]["status"] == "completed"
        assert nodes["bad"]["status"] == "skipped"
        assert await text_of(client, owner, nodes["good"]["artifact_id"]) == "good: axx"
        # Charged what ran: two iterations of grow, and good.
        assert body["credits_used"] == 3
        assert await balance(client, owner) == before - 3

    async def test_max_iterations_reached_goes_down_exhausted(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        before = await balance(client, owner)
        graph = loop(3, {"operator": "contains", "value": "never"})
        _, accepted, body = await run(client, owner, graph)
        assert accepted["estimated_credits"] == 3 + 1
        assert body["status"] == "completed", body
        assert sorted(iterations(body, "grow")) == [0, 1, 2]
        nodes = nodes_of(body)
        assert nodes["good"]["status"] == "skipped"
        assert nodes["bad"]["status"] == "completed"
        assert await text_of(client, owner, nodes["bad"]["artifact_id"]) == "bad: axxx"
        assert body["credits_used"] == 4
        assert await balance(client, owner) == before - 4

    async def test_the_condition_holding_at_once_runs_one_iteration(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        _, _, body = await run(client, owner, loop(), text="xx")
        assert body["status"] == "completed", body
        assert sorted(iterations(body, "grow")) == [0]
        assert body["credits_used"] == 2

    async def test_a_json_path_condition(self, client: httpx.AsyncClient, owner: User) -> None:
        """A judge's JSON answer: repeat while its score is below 7."""
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat", max_iterations=6),
                n("judge", "JsonBuild", template='{"score": {{ (text | length) * 2 }} }'),
                n("grow", "TextTemplate", template="{{ text }}x"),
                n("until", "Until", operator="gte", value=7, path="score"),
            ],
            [
                edge("in", "rep"),
                edge("rep", "grow"),
                edge("grow", "judge"),
                edge("judge", "until"),
            ],
        )
        _, _, body = await run(client, owner, graph, text="ab")
        # grow("ab") = "abx" -> 6; next starts from '{"score": 6}' -> 13 chars -> 28.
        assert body["status"] == "completed", body
        assert sorted(iterations(body, "judge")) == [0, 1]

    async def test_iteration_events_carry_the_index(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, accepted, body = await run(client, owner, loop())
        assert body["status"] == "completed"
        events = await events_of(client, owner, wf, accepted["run_id"])
        done = [
            (ev["data"]["item_index"], ev["data"]["item_count"])
            for ev in events
            if ev["type"] == "node.completed" and ev.get("node_id") == "grow"
        ]
        assert [k for k, _ in done] == [0, 1]
        checks = [
            (ev["data"].get("item_index"), ev["data"].get("outputs"))
            for ev in events
            if ev["type"] == "node.completed" and ev.get("node_id") == "until"
        ]
        # Each iteration's Until, then the drawn one (no index) routing the run on.
        assert checks[0] == (0, ["exhausted"])
        assert checks[1] == (1, ["done"])
        assert checks[2] == (None, ["done"])

    async def test_a_region_node_taking_an_outside_input_gets_it_every_iteration(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = loop()
        graph["nodes"].append(n("brief", "TextInput", key="brief", text="B"))
        graph["nodes"].append(n("say", "Merge", mode="all"))
        graph["edges"] += [edge("brief", "say"), edge("rep", "say")]
        _, _, body = await run(client, owner, graph)
        assert body["status"] == "completed", body
        say = iterations(body, "say")
        assert json.loads(await text_of(client, owner, say[0]["artifact_id"])) == ["B", "a"]
        assert json.loads(await text_of(client, owner, say[1]["artifact_id"])) == ["B", "ax"]


class TestCache:
    async def test_iterations_do_not_read_the_cache(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, loop())
        bodies = []
        for _ in range(2):
            r = await execute(client, owner, wf, {"input": {"text": "a"}, "cache": True})
            assert r.status_code == 202, r.text
            bodies.append(await wait_for_run(client, owner, wf, r.json()["run_id"], timeout=60))
        second = bodies[1]
        assert second["status"] == "completed", second
        assert not any(nr["cached"] for nr in iterations(second, "grow").values())
        assert second["credits_used"] == bodies[0]["credits_used"] - 1  # good was reused
        assert nodes_of(second)["good"]["cached"] is True


class TestEstimate:
    async def test_the_estimate_holds_max_iterations_within_the_server_cap(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, loop(50))
        r = await client.post(f"/api/v1/workflows/{wf}/estimate", json={}, headers=owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["estimated_credits"] == 10 + 1  # the server caps at 10 iterations
        parts = {p["node_id"]: p["credits"] for p in body["nodes"]}
        assert parts["grow"] == 10
        _, _, run_body = await run(client, owner, loop(50, {"operator": "contains", "value": "z"}))
        assert len(iterations(run_body, "grow")) == 10


class TestFailures:
    async def test_a_failure_inside_an_iteration_fails_the_run(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        before = await balance(client, owner)
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat", max_iterations=3),
                n("grow", "TextTemplate", template="{{ text }}x"),
                n("parse", "ParseJson"),
                n("until", "Until", operator="is_not_empty"),
                n("after", "TextTemplate", template="{{ text }}"),
            ],
            [
                edge("in", "rep"),
                edge("rep", "grow"),
                edge("grow", "parse"),
                edge("parse", "until"),
                edge("until", "after", "done"),
            ],
        )
        _, _, body = await run(client, owner, graph, text="nope")
        assert body["status"] == "failed", body
        assert body["error"]["code"] == "invalid_json"
        assert body["error"]["node_id"] == "parse"
        assert iterations(body, "parse")[0]["status"] == "failed"
        assert iterations(body, "until")[0]["status"] == "skipped"
        nodes = nodes_of(body)
        assert nodes["until"]["status"] == "skipped"
        assert nodes["after"]["status"] == "skipped"
        assert body["credits_used"] == 1
        assert await balance(client, owner) == before - 1

    async def test_an_error_branch_inside_the_region(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """Iteration 1 cannot parse its input: the error goes down parse's error edge, the
        fix feeds the Until, and iteration 2 starts from the fix and passes."""
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat", max_iterations=4),
                n("parse", "ParseJson"),
                n("ok", "TextTemplate", template="parsed"),
                n("fix", "TextTemplate", template='{"fixed": true}'),
                n("join", "Merge"),
                n("until", "Until", operator="equals", value="parsed"),
            ],
            [
                edge("in", "rep"),
                edge("rep", "parse"),
                edge("parse", "ok"),
                edge("parse", "fix", "error"),
                edge("ok", "join"),
                edge("fix", "join"),
                edge("join", "until"),
            ],
        )
        _, _, body = await run(client, owner, graph, text="nope")
        assert body["status"] == "completed", body
        assert body["error"] is None
        parse = iterations(body, "parse")
        assert (parse[0]["status"], parse[1]["status"]) == ("failed", "completed")
        ok, fix = iterations(body, "ok"), iterations(body, "fix")
        assert (ok[0]["status"], fix[0]["status"]) == ("skipped", "completed")
        assert (ok[1]["status"], fix[1]["status"]) == ("completed", "skipped")
        assert sorted(iterations(body, "until")) == [0, 1]
        # Charged what ran: fix in iteration 1, ok in iteration 2.
        assert body["credits_used"] == 2

    async def test_an_iteration_not_reaching_its_until_skips_it(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat", max_iterations=4),
                n("gate", "If", operator="equals", value="go"),
                n("until", "Until", operator="is_not_empty"),
                n("after", "TextTemplate", template="{{ text }}"),
            ],
            [
                edge("in", "rep"),
                edge("rep", "gate"),
                edge("gate", "until", "true"),
                edge("until", "after", "done"),
            ],
        )
        _, _, body = await run(client, owner, graph, text="stop")
        assert body["status"] == "completed", body
        assert sorted(iterations(body, "gate")) == [0]
        nodes = nodes_of(body)
        assert nodes["until"]["status"] == "skipped"
        assert nodes["after"]["status"] == "skipped"


class TestRetry:
    async def test_a_retry_runs_the_loop_again_from_its_first_iteration(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # A number test on text: iteration 1's Until fails the run (not_a_number).
        wf, _, failed = await run(client, owner, loop(until={"operator": "gt", "value": 1}))
        assert failed["status"] == "failed", failed
        assert failed["error"]["code"] == "not_a_number"
        assert failed["error"]["node_id"] == "until"
        fix = {"until": {"operator": "contains", "value": "xx"}}
        r = await client.post(
            f"/api/v1/workflows/{wf}/runs/{failed['id']}/retry",
            json={"params": fix},
            headers=owner.headers,
        )
        assert r.status_code == 202, r.text
        body = await wait_for_run(client, owner, wf, r.json()["run_id"], timeout=60)
        assert body["status"] == "completed", body
        assert sorted(iterations(body, "grow")) == [0, 1]
        assert nodes_of(body)["good"]["status"] == "completed"
        assert body["credits_used"] == 3


class TestCancel:
    async def test_cancel_during_an_iteration(self, client: httpx.AsyncClient, owner: User) -> None:
        before = await balance(client, owner)
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat", max_iterations=10),
                n("grow", "TextTemplate", template="{{ text }}x"),
                # Long enough that the second iteration's wait is still running when the
                # cancel lands, however busy the machine (0.4 s was not, under a parallel
                # suite); the cancel ends it at once.
                n("wait", "Delay", seconds=2.5),
                n("until", "Until", operator="contains", value="never"),
            ],
            [edge("in", "rep"), edge("rep", "grow"), edge("grow", "wait"), edge("wait", "until")],
        )
        wf = await create_workflow(client, owner, graph)
        r = await execute(client, owner, wf, {"input": {"text": "a"}, "cache": False})
        run_id = r.json()["run_id"]
        for _ in range(1000):
            body = (
                await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=owner.headers)
            ).json()
            waits = iterations(body, "wait")
            if waits.get(1, {}).get("status") == "running":
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"iteration 2 never ran: {body}")
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202, r.text
        body = await wait_for_run(client, owner, wf, run_id, timeout=60)
        assert body["status"] == "cancelled", body
        statuses = {nr["status"] for nr in body["node_runs"]}
        assert "running" not in statuses and "pending" not in statuses and "queued" not in statuses
        assert iterations(body, "wait")[1]["status"] == "cancelled"
        assert len(iterations(body, "grow")) == 2  # no third iteration after the cancel
        assert nodes_of(body)["until"]["status"] == "cancelled"
        assert body["credits_used"] == 2
        assert await balance(client, owner) == before - 2


class TestValidation:
    async def problems(
        self, client: httpx.AsyncClient, user: User, graph: dict[str, Any]
    ) -> dict[str, str]:
        r = await client.post(
            "/api/v1/workflows", json={"name": "x", "graph_json": graph}, headers=user.headers
        )
        body = assert_problem(r, 400, "invalid_graph")
        return {e["pointer"]: e["message"] for e in body["errors"]}

    async def test_an_invalid_condition_has_a_pointer(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        errors = await self.problems(
            client, owner, loop(until={"operator": "matches", "value": "(a+"})
        )
        assert "bad regular expression" in errors["/graph_json/nodes/3/data/value"]
        errors = await self.problems(
            client, owner, loop(until={"operator": "gt", "value": 1, "path": "score[?"})
        )
        assert "JMESPath" in errors["/graph_json/nodes/3/data/path"]

    @pytest.mark.parametrize("value", [0, -1, "many", None])
    async def test_a_bad_max_iterations_has_a_pointer(
        self, client: httpx.AsyncClient, owner: User, value: Any
    ) -> None:
        graph = loop()
        graph["nodes"][1]["data"]["max_iterations"] = value
        errors = await self.problems(client, owner, graph)
        assert "/graph_json/nodes/1/data/max_iterations" in errors, errors

    async def test_an_until_without_a_repeat(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [n("in", "TextInput"), n("until", "Until", operator="is_empty")],
            [edge("in", "until")],
        )
        errors = await self.problems(client, owner, graph)
        assert "connect it after a Repeat" in errors["/graph_json/nodes/1"]

    async def test_a_repeat_without_an_until(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [n("in", "TextInput"), n("rep", "Repeat"), n("t", "TextTemplate")],
            [edge("in", "rep"), edge("rep", "t")],
        )
        errors = await self.problems(client, owner, graph)
        assert "never reaches an Until" in errors["/graph_json/nodes/1"]

    async def test_a_repeat_with_two_untils(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = loop()
        graph["nodes"].append(n("until2", "Until", operator="is_empty"))
        graph["edges"].append(edge("grow", "until2"))
        errors = await self.problems(client, owner, graph)
        assert "several Until nodes" in errors["/graph_json/nodes/1"]

    async def test_a_region_node_taking_its_until_is_refused(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = loop()
        graph["nodes"].append(n("both", "Merge"))
        graph["edges"] += [edge("grow", "both"), edge("until", "both", "done")]
        errors = await self.problems(client, owner, graph)
        assert "the Until of its own Repeat rep" in errors["/graph_json/nodes/6"], errors

    async def test_a_repeat_inside_a_for_each_is_refused(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("each", "ForEach"),
                n("rep", "Repeat"),
                n("t", "TextTemplate"),
                n("until", "Until", operator="is_empty"),
                n("all", "Collect"),
            ],
            [
                edge("in", "each"),
                edge("each", "rep"),
                edge("rep", "t"),
                edge("t", "until"),
                edge("until", "all", "done"),
            ],
        )
        errors = await self.problems(client, owner, graph)
        assert any("no nesting yet" in m for m in errors.values()), errors

    async def test_a_for_each_inside_a_repeat_is_refused(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat"),
                n("each", "ForEach"),
                n("t", "TextTemplate"),
                n("all", "Collect"),
                n("until", "Until", operator="is_empty"),
            ],
            [
                edge("in", "rep"),
                edge("rep", "each"),
                edge("each", "t"),
                edge("t", "all"),
                edge("all", "until"),
            ],
        )
        errors = await self.problems(client, owner, graph)
        assert any("no nesting yet" in m for m in errors.values()), errors

    async def test_hash_in_node_ids_is_refused_with_a_repeat(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = loop()
        graph["nodes"][5]["id"] = "bad#1"
        graph["edges"][-1]["target"] = "bad#1"
        errors = await self.problems(client, owner, graph)
        assert "may not use '#'" in errors["/graph_json/nodes/5/id"]

    async def test_the_catalog_lists_repeat_and_until(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.get("/api/v1/node-types", headers=owner.headers)
        types = {t["type"]: t for t in r.json()}
        assert [o["name"] for o in types["Until"]["outputs"]] == ["done", "exhausted", "error"]
        assert "RepeatIteration" not in types
        assert types["Repeat"]["category"] == "batch"
