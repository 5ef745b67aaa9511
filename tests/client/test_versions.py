"""Versions and estimates through the Python client and the ``nodeloom workflows`` commands,
against the package's real server."""

from __future__ import annotations

import json

import pytest

from nodeloom.client import AsyncClient, Client, errors
from tests.client.conftest import Account, Live, cli, greeting


def priced() -> dict[str, object]:
    graph = greeting()
    graph["nodes"].append(  # type: ignore[union-attr]
        {"id": "img", "type": "RenderText", "position": {"x": 0, "y": 0}, "data": {}}
    )
    graph["edges"].append({"id": "tpl->img", "source": "tpl", "target": "img"})  # type: ignore[union-attr]
    return graph


class TestClient:
    def test_versions_restore_and_lost_update(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "Greeting", "graph_json": greeting()}, message="first")
        assert wf.version == 1
        changed = greeting()
        changed["nodes"][1]["data"]["template"] = "Bye {{ text }}"  # type: ignore[index]
        v2 = nl.workflows.update(wf.id, graph_json=changed, message="bye", expected_version=1)
        assert v2.version == 2
        with pytest.raises(errors.PreconditionFailed) as lost:
            nl.workflows.update(wf.id, name="stale tab", expected_version=1)
        assert lost.value.current_version == 2 and lost.value.http_status == 412
        listed = list(nl.workflows.versions(wf.id, page_size=1))  # follows the Link header
        assert [(v.version, v.message) for v in listed] == [(2, "bye"), (1, "first")]
        assert listed[0].created_by.via == "api_key" and listed[0].created_by.api_key_name
        first = nl.workflows.version(wf.id, 1)
        assert first.graph_json == wf.graph_json
        restored = nl.workflows.restore(wf.id, 1, message="undo", expected_version=2)
        assert restored.version == 3 and restored.graph_json == wf.graph_json
        assert next(iter(nl.workflows.versions(wf.id))).restored_from == 1
        with pytest.raises(errors.NotFound):
            nl.workflows.version(wf.id, 99)

    def test_estimate_then_the_run_charges_it(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "Priced", "graph_json": priced()})
        estimate = nl.workflows.estimate(wf.id, {"text": "there"})
        assert estimate.estimated_credits == 3 and estimate.sufficient
        assert [(x.node_id, x.credits) for x in estimate.nodes] == [
            ("in", 0),
            ("tpl", 1),
            ("img", 2),
        ]
        run = nl.workflows.execute(wf.id, {"text": "there"}, cache=False).wait(timeout=60)
        assert run.status == "completed" and run.credits_used == estimate.estimated_credits
        assert run.workflow_version == 1


class TestAsyncClient:
    async def test_same_methods_awaited(self, live: Live, account: Account) -> None:
        async with AsyncClient(live.url, account.api_key) as nl:
            wf = await nl.workflows.create({"name": "Async", "graph_json": greeting()})
            await nl.workflows.update(wf.id, name="Async 2")
            assert [v.version async for v in nl.workflows.versions(wf.id)] == [2, 1]
            assert (await nl.workflows.version(wf.id, 1)).name == "Async"
            assert (await nl.workflows.restore(wf.id, 1)).name == "Async"
            assert (await nl.workflows.estimate(wf.id)).estimated_credits == 1


class TestCommands:
    def test_versions_restore_estimate(self, live: Live, account: Account) -> None:
        env: dict[str, str | None] = {"NODELOOM_URL": live.url, "NODELOOM_API_KEY": account.api_key}
        with Client(live.url, account.api_key) as nl:
            wf = nl.workflows.create({"name": "CLI versions", "graph_json": priced()})
            nl.workflows.update(wf.id, name="CLI versions", message="second save")
        shown = cli("workflows", "versions", "CLI versions", env=env)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].split()[:3] == ["version", "saved", "(UTC)"]
        assert lines[1].startswith("2 (current)") and "second save" in lines[1]
        assert account.email in lines[1] and lines[2].startswith("1 ")
        listed = json.loads(cli("workflows", "versions", wf.id, "--json", env=env).stdout)
        assert [v["version"] for v in listed] == [2, 1]

        done = cli("workflows", "restore", wf.id, "1", "-m", "back", env=env)
        assert done.returncode == 0, done.stderr
        assert "restored version 1 of 'CLI versions' as version 3" in done.stderr
        missing = cli("workflows", "restore", wf.id, "42", env=env)
        assert missing.returncode == 1 and "(not_found)" in missing.stderr

        done = cli("workflows", "estimate", wf.id, "-i", "text=hi", env=env)
        assert done.returncode == 0, done.stderr
        rows = [line.split() for line in done.stdout.splitlines()]
        assert rows == [
            ["node", "type", "credits"],
            ["in", "TextInput", "0"],
            ["tpl", "TextTemplate", "1"],
            ["img", "RenderText", "2"],
        ]
        assert "3 credits at most" in done.stderr and "(enough)" in done.stderr
        as_json = json.loads(cli("workflows", "estimate", wf.id, "--json", env=env).stdout)
        assert as_json["estimated_credits"] == 3 and as_json["workflow_version"] == 3
        bad = cli("workflows", "estimate", wf.id, "-i", "nokey", env=env)
        assert bad.returncode == 1 and "key=value" in bad.stderr
