"""Workflows that decide, over HTTP on SQLite (in-process driver) and PostgreSQL (queue
workers): If / Switch / Merge route a run and skip the branches not taken, error outputs
carry a failure on, JSON nodes parse and build values; the estimate holds the most
expensive way through, the charge is what ran."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.runs_helpers import balance, create_workflow, edge, execute, g, n, wait_for_run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


async def run(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], run_input: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    wf = await create_workflow(client, user, graph)
    r = await execute(client, user, wf, {"input": run_input, "cache": False})
    assert r.status_code == 202, r.text
    return r.json(), await wait_for_run(client, user, wf, r.json()["run_id"], timeout=60)


def nodes_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["node_id"]: node for node in body["node_runs"] if node.get("item_index") is None}


async def text_of(client: httpx.AsyncClient, user: User, artifact_id: str) -> str:
    r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=user.headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r.text


def routed(template_false: str = "quiet: {{ text }}") -> dict[str, Any]:
    """in -> if (contains "urgent") -> true: loud (1 credit); false: quiet -> twice (2)."""
    return g(
        [
            n("in", "TextInput"),
            n("if", "If", operator="contains", value="urgent", case_sensitive=False),
            n("loud", "TextTemplate", template="LOUD: {{ text }}"),
            n("quiet", "TextTemplate", template=template_false),
            n("twice", "TextTemplate", template="{{ text }} {{ text }}"),
        ],
        [
            edge("in", "if"),
            edge("if", "loud", "true"),
            edge("if", "quiet", "false"),
            edge("quiet", "twice"),
        ],
    )


class TestCatalog:
    async def test_outputs_are_listed_and_output_stays(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.get("/api/v1/node-types", headers=owner.headers)
        types = {t["type"]: t for t in r.json()}
        outputs = {
            t: [(o["name"], o["kind"], o["role"]) for o in types[t]["outputs"]] for t in types
        }
        assert outputs["If"] == [
            ("true", "text", "branch"),
            ("false", "text", "branch"),
            ("error", "json", "error"),
        ]
        assert outputs["TextInput"] == [("output", "text", "output"), ("error", "json", "error")]
        assert types["TextInput"]["output"] == {"kind": "text", "content_type": "text/plain"}
        assert types["ParseJson"]["output"] == {"kind": "json", "content_type": "text/plain"}
        assert types["Switch"]["outputs_from_param"] == "cases"
        assert types["Merge"]["inputs"] == [
            {"name": "inputs", "kind": "text", "required": True, "multiple": True}
        ]


class TestValidation:
    async def problems(
        self, client: httpx.AsyncClient, user: User, graph: dict[str, Any]
    ) -> list[Any]:
        r = await client.post(
            "/api/v1/workflows", json={"name": "x", "graph_json": graph}, headers=user.headers
        )
        body = assert_problem(r, 400, "invalid_graph")
        errors = body["errors"]
        assert isinstance(errors, list)
        return errors

    async def test_an_if_edge_must_name_its_output(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = routed()
        graph["edges"][1].pop("sourceHandle")
        graph["edges"][2]["sourceHandle"] = "maybe"
        errors = await self.problems(client, owner, graph)
        assert [e["pointer"] for e in errors] == [
            "/graph_json/edges/1/sourceHandle",
            "/graph_json/edges/2/sourceHandle",
        ]
        assert "'true', 'false', 'error'" in errors[0]["message"]
        assert "unknown handle 'maybe'" in errors[1]["message"]

    async def test_bad_conditions_are_refused_with_pointers(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("if", "If", operator="matches", value="(a+"),
                n("num", "If", operator="gt", value="ten"),
                n(
                    "sw",
                    "Switch",
                    cases=[
                        {"name": "a", "operator": "eq", "value": 1, "path": "answer[?"},
                        {"name": "default", "operator": "is_empty"},
                        {"name": "b", "operator": "matches", "value": r"(\w)\1"},
                    ],
                ),
                n("build", "JsonBuild", template="{{ text "),
            ],
            [edge("in", "if"), edge("in", "num"), edge("in", "sw"), edge("in", "build")],
        )
        errors = await self.problems(client, owner, graph)
        pointers = {e["pointer"]: e["message"] for e in errors}
        assert "bad regular expression" in pointers["/graph_json/nodes/1/data/value"]
        assert "must be one" in pointers["/graph_json/nodes/2/data/value"]
        assert "JMESPath" in pointers["/graph_json/nodes/3/data/cases/0/path"]
        assert "reserved" in pointers["/graph_json/nodes/3/data/cases/1/name"]
        # A backreference: RE2 has none (it would need backtracking).
        assert "bad regular expression" in pointers["/graph_json/nodes/3/data/cases/2/value"]
        assert "template" in pointers["/graph_json/nodes/4/data"]

    @pytest.mark.parametrize(
        ("data", "pointer"),
        [
            ({"cases": "billing"}, "/graph_json/nodes/1/data/cases"),
            ({"cases": [1]}, "/graph_json/nodes/1/data/cases/0"),
            (
                {"cases": [{"name": "a b", "operator": "is_empty"}]},
                "/graph_json/nodes/1/data/cases/0/name",
            ),
            (
                {"cases": [{"name": "a", "operator": "nope"}]},
                "/graph_json/nodes/1/data/cases/0/operator",
            ),
            (
                {"cases": [{"name": "a", "operator": "eq", "value": [1]}]},
                "/graph_json/nodes/1/data/cases/0/value",
            ),
            (
                {"cases": [{"name": "a", "operator": "eq", "value": 1, "path": 5}]},
                "/graph_json/nodes/1/data/cases/0/path",
            ),
            (
                {"cases": [{"name": "a", "operator": "is_empty"}] * 2},
                "/graph_json/nodes/1/data/cases/1/name",
            ),
        ],
    )
    async def test_malformed_switch_params_are_a_400_with_a_pointer(
        self, client: httpx.AsyncClient, owner: User, data: dict[str, Any], pointer: str
    ) -> None:
        graph = g([n("in", "TextInput"), n("sw", "Switch", **data)], [edge("in", "sw", None)])
        errors = await self.problems(client, owner, graph)
        assert pointer in [e["pointer"] for e in errors], errors

    async def test_json_feeds_text_but_text_does_not_feed_json(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        ok = g(
            [n("in", "TextInput"), n("p", "ParseJson"), n("t", "TextTemplate")],
            [edge("in", "p"), edge("p", "t")],
        )
        await create_workflow(client, owner, ok)
        # An error output is json: into a text input it goes.
        caught = g(
            [n("in", "TextInput"), n("p", "ParseJson"), n("t", "TextTemplate")],
            [edge("in", "p"), edge("p", "t", "error")],
        )
        await create_workflow(client, owner, caught)


class TestIf:
    async def test_the_branch_not_taken_is_skipped_and_not_charged(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        before = await balance(client, owner)
        accepted, body = await run(client, owner, routed(), {"text": "URGENT: the server is down"})
        # The dearest way: quiet + twice (2 credits), not loud + quiet + twice (3).
        assert accepted["estimated_credits"] == 2
        assert body["status"] == "completed", body
        nodes = nodes_of(body)
        assert nodes["if"]["status"] == "completed"
        assert nodes["loud"]["status"] == "completed"
        assert nodes["quiet"]["status"] == nodes["twice"]["status"] == "skipped"
        assert nodes["quiet"]["error"]["code"] == "branch_not_taken"
        assert nodes["quiet"]["credits_used"] == 0 and nodes["quiet"]["artifact_id"] is None
        assert await text_of(client, owner, nodes["if"]["artifact_id"]) == (
            "URGENT: the server is down"
        )
        assert await text_of(client, owner, nodes["loud"]["artifact_id"]) == (
            "LOUD: URGENT: the server is down"
        )
        assert body["credits_used"] == 1
        assert await balance(client, owner) == before - 1

    async def test_false_runs_the_other_way(self, client: httpx.AsyncClient, owner: User) -> None:
        # A template Jinja renders: the false branch runs in the sandbox (a driven run).
        graph = routed("{% if text %}quiet: {{ text }}{% endif %}")
        _, body = await run(client, owner, graph, {"text": "all good"})
        assert body["status"] == "completed", body
        nodes = nodes_of(body)
        assert nodes["loud"]["status"] == "skipped"
        assert [nodes[x]["status"] for x in ("quiet", "twice")] == ["completed", "completed"]
        assert await text_of(client, owner, nodes["twice"]["artifact_id"]) == (
            "quiet: all good quiet: all good"
        )
        assert body["credits_used"] == 2

    async def test_events_say_which_output_was_taken(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, routed())
        r = await execute(client, owner, wf, {"input": {"text": "urgent"}})
        run_id = r.json()["run_id"]
        await wait_for_run(client, owner, wf, run_id)
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}/events", headers=owner.headers)
        events = [
            json.loads(line[len("data:") :])
            for line in r.text.splitlines()
            if line.startswith("data:")
        ]
        completed = [e for e in events if e["type"] == "node.completed" and e["node_id"] == "if"]
        assert completed[0]["data"]["outputs"] == ["true"]
        skipped = {e["node_id"] for e in events if e["type"] == "node.skipped"}
        assert skipped == {"quiet", "twice"}


class TestRegexAndEstimate:
    async def test_a_backtracking_pattern_matches_in_linear_time(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """(a+)+$ on a's then a b takes exponential time in a backtracking engine; RE2
        answers at once, on the event loop, and the server keeps answering."""
        graph = g(
            [n("in", "TextInput"), n("if", "If", operator="matches", value="(a+)+$")],
            [edge("in", "if")],
        )
        _, body = await run(client, owner, graph, {"text": "a" * 50_000 + "b"})
        assert body["status"] == "completed"
        r = await client.get("/healthz")
        assert r.status_code == 200

    async def test_the_estimate_endpoint_answers_the_most_expensive_way(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, routed())
        r = await client.post(f"/api/v1/workflows/{wf}/estimate", json={}, headers=owner.headers)
        assert r.status_code == 200, r.text
        assert r.json()["estimated_credits"] == 2


class TestSwitchAndMerge:
    def graph(self, mode: str = "first") -> dict[str, Any]:
        """An LLM-like JSON answer, parsed, routed by its category, merged back."""
        return g(
            [
                n("in", "TextInput"),
                n("parse", "ParseJson"),
                n(
                    "route",
                    "Switch",
                    cases=[
                        {
                            "name": "billing",
                            "operator": "equals",
                            "value": "billing",
                            "path": "category",
                        },
                        {"name": "urgent", "operator": "gte", "value": 8, "path": "severity"},
                    ],
                ),
                n("bill", "TextTemplate", template="to billing"),
                n("page", "TextTemplate", template="page someone"),
                n("other", "TextTemplate", template="to the queue"),
                n("join", "Merge", mode=mode),
            ],
            [
                edge("in", "parse"),
                edge("parse", "route"),
                edge("route", "bill", "billing"),
                edge("route", "page", "urgent"),
                edge("route", "other", "default"),
                edge("bill", "join"),
                edge("page", "join"),
                edge("other", "join"),
            ],
        )

    @pytest.mark.parametrize(
        ("answer", "taken", "merged"),
        [
            ({"category": "billing", "severity": 9}, "bill", "to billing"),
            ({"category": "outage", "severity": 9}, "page", "page someone"),
            ({"category": "outage", "severity": 2}, "other", "to the queue"),
        ],
    )
    async def test_routes_by_the_json_answer(
        self,
        client: httpx.AsyncClient,
        owner: User,
        answer: dict[str, Any],
        taken: str,
        merged: str,
    ) -> None:
        accepted, body = await run(client, owner, self.graph(), {"text": json.dumps(answer)})
        assert accepted["estimated_credits"] == 1  # one of three 1-credit branches
        assert body["status"] == "completed", body
        nodes = nodes_of(body)
        for name in ("bill", "page", "other"):
            assert nodes[name]["status"] == ("completed" if name == taken else "skipped")
        assert nodes["join"]["status"] == "completed"
        assert await text_of(client, owner, nodes["join"]["artifact_id"]) == merged
        assert body["credits_used"] == 1

    async def test_merge_all_lists_what_ran(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("if", "If", operator="is_not_empty"),
                n("yes", "TextTemplate", template="yes"),
                n("always", "TextTemplate", template="always"),
                n("join", "Merge", mode="all"),
            ],
            [
                edge("in", "if"),
                edge("if", "yes", "false"),
                edge("in", "always"),
                edge("yes", "join"),
                edge("always", "join"),
            ],
        )
        _, body = await run(client, owner, graph, {"text": "something"})
        nodes = nodes_of(body)
        assert nodes["yes"]["status"] == "skipped"
        assert json.loads(await text_of(client, owner, nodes["join"]["artifact_id"])) == ["always"]

    async def test_merge_is_skipped_when_no_branch_ran(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("if", "If", operator="is_empty"),
                n("a", "TextTemplate", template="a"),
                n("join", "Merge"),
                n("after", "TextTemplate", template="after {{ text }}"),
            ],
            [edge("in", "if"), edge("if", "a", "true"), edge("a", "join"), edge("join", "after")],
        )
        _, body = await run(client, owner, graph, {"text": "not empty"})
        assert body["status"] == "completed"
        nodes = nodes_of(body)
        assert [nodes[x]["status"] for x in ("a", "join", "after")] == ["skipped"] * 3

    async def test_a_number_test_on_text_fails_the_node_clearly(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        _, body = await run(client, owner, self.graph(), {"text": '{"severity": "high"}'})
        assert body["status"] == "failed"
        assert body["error"]["code"] == "not_a_number"
        assert body["error"]["node_id"] == "route"
        assert "'severity' picks" in body["error"]["message"]


class TestJson:
    async def test_parse_error_says_where(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g([n("in", "TextInput"), n("p", "ParseJson")], [edge("in", "p")])
        _, body = await run(client, owner, graph, {"text": '{"a": 1,\n "b": }'})
        assert body["status"] == "failed"
        assert body["error"]["code"] == "invalid_json"
        assert "line 2, column 7" in body["error"]["message"]

    async def test_too_deep_fails_the_node_not_the_server(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g([n("in", "TextInput"), n("p", "ParseJson")], [edge("in", "p")])
        for text, code in (
            ("[" * 100_000 + "]" * 100_000, "json_too_deep"),
            ("[" * 65 + "]" * 65, "json_too_deep"),
        ):
            _, body = await run(client, owner, graph, {"text": text})
            assert body["status"] == "failed"
            assert body["error"]["code"] == code
        r = await client.get("/healthz")
        assert r.status_code == 200

    async def test_build_and_extract(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n(
                    "build",
                    "JsonBuild",
                    template='{"who": {{ text | tojson }}, "n": {{ input.n }}}',
                ),
                n("pick", "JsonExtract", expression="who"),
                n("bad", "JsonBuild", template="{'single': 'quotes'}"),
            ],
            [edge("in", "build"), edge("build", "pick"), edge("in", "bad")],
        )
        _, body = await run(client, owner, graph, {"text": 'Ada "the first"', "n": 3})
        nodes = nodes_of(body)
        assert json.loads(await text_of(client, owner, nodes["build"]["artifact_id"])) == {
            "who": 'Ada "the first"',
            "n": 3,
        }
        assert await text_of(client, owner, nodes["pick"]["artifact_id"]) == 'Ada "the first"'
        assert nodes["bad"]["status"] == "failed"
        assert nodes["bad"]["error"]["code"] == "invalid_json"
        kinds = {}
        for name in ("in", "build", "pick"):
            r = await client.get(
                f"/api/v1/artifacts/{nodes[name]['artifact_id']}/metadata", headers=owner.headers
            )
            assert r.json()["content_type"] == "text/plain"
            kinds[name] = r.json()["kind"]
        assert kinds == {"in": "text", "build": "json", "pick": "text"}


class TestErrorOutput:
    def graph(self) -> dict[str, Any]:
        """in -> parse (ParseJson) -> ok (1 credit); parse's error -> report (1 credit)."""
        return g(
            [
                n("in", "TextInput"),
                n("parse", "ParseJson"),
                n("ok", "TextTemplate", template="parsed {{ text }}"),
                n("report", "JsonExtract", expression="code"),
            ],
            [edge("in", "parse"), edge("parse", "ok"), edge("parse", "report", "error")],
        )

    async def test_a_failure_goes_down_the_error_edge_and_the_run_completes(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        before = await balance(client, owner)
        accepted, body = await run(client, owner, self.graph(), {"text": "not json"})
        assert accepted["estimated_credits"] == 1  # ok or report, never both
        assert body["status"] == "completed", body
        assert body["error"] is None
        nodes = nodes_of(body)
        assert nodes["parse"]["status"] == "failed"
        assert nodes["parse"]["error"]["code"] == "invalid_json"
        r = await client.get(
            f"/api/v1/artifacts/{nodes['parse']['artifact_id']}/metadata", headers=owner.headers
        )
        assert r.json()["kind"] == "json"
        error = json.loads(await text_of(client, owner, nodes["parse"]["artifact_id"]))
        assert error["code"] == "invalid_json" and error["node_id"] == "parse"
        assert "not valid JSON" in error["message"]
        assert nodes["ok"]["status"] == "skipped"
        assert nodes["report"]["status"] == "completed"
        assert await text_of(client, owner, nodes["report"]["artifact_id"]) == "invalid_json"
        assert await balance(client, owner) == before - body["credits_used"]

    async def test_without_a_failure_the_error_edge_is_skipped(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        _, body = await run(client, owner, self.graph(), {"text": '{"a": 1}'})
        nodes = nodes_of(body)
        assert body["status"] == "completed"
        assert nodes["ok"]["status"] == "completed"
        assert nodes["report"]["status"] == "skipped"
        assert nodes["report"]["error"]["code"] == "branch_not_taken"

    async def test_an_error_edge_inside_a_for_each_item(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = g(
            [
                n("in", "TextInput"),
                n("each", "ForEach"),
                n("parse", "ParseJson"),
                n("ok", "JsonExtract", expression="name"),
                n("oops", "TextTemplate", template="bad item"),
                n("join", "Merge"),
                n("all", "Collect"),
            ],
            [
                edge("in", "each"),
                edge("each", "parse"),
                edge("parse", "ok"),
                edge("parse", "oops", "error"),
                edge("ok", "join"),
                edge("oops", "join"),
                edge("join", "all"),
            ],
        )
        text = '{"name": "a"}\nnope\n{"name": "c"}'
        _, body = await run(client, owner, graph, {"text": text})
        assert body["status"] == "completed", body
        items = {
            (node["node_id"], node["item_index"]): node["status"]
            for node in body["node_runs"]
            if node["item_index"] is not None
        }
        assert items[("parse", 1)] == "failed"
        assert items[("ok", 1)] == "skipped" and items[("oops", 1)] == "completed"
        assert items[("oops", 0)] == items[("oops", 2)] == "skipped"
        collected = nodes_of(body)["all"]["artifact_id"]
        assert json.loads(await text_of(client, owner, collected)) == ["a", "bad item", "c"]


class TestRetry:
    async def test_a_retry_decides_again_and_reuses_the_rest(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """The If is run again (which way it went is not in its artifact), the nodes before
        it are reused, and the branch not taken is skipped again."""
        graph = g(
            [
                n("in", "TextInput"),
                n("tpl", "TextTemplate", template="[{{ text }}]"),
                n("if", "If", operator="contains", value="["),
                n("parse", "ParseJson"),
                n("no", "TextTemplate", template="no"),
            ],
            [
                edge("in", "tpl"),
                edge("tpl", "if"),
                edge("if", "parse", "true"),
                edge("if", "no", "false"),
            ],
        )
        wf = await create_workflow(client, owner, graph)
        r = await execute(client, owner, wf, {"input": {"text": "x"}})
        first = await wait_for_run(client, owner, wf, r.json()["run_id"])
        assert first["status"] == "failed" and first["error"]["node_id"] == "parse"
        r = await client.post(
            f"/api/v1/workflows/{wf}/runs/{first['id']}/retry", headers=owner.headers
        )
        assert r.status_code == 202, r.text
        again = await wait_for_run(client, owner, wf, r.json()["run_id"])
        nodes = nodes_of(again)
        assert nodes["tpl"]["cached"] is True and nodes["tpl"]["credits_used"] == 0
        assert nodes["if"]["status"] == "completed" and nodes["if"]["cached"] is False
        assert nodes["no"]["status"] == "skipped"
        assert nodes["parse"]["status"] == "failed"
