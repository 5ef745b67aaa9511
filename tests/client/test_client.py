"""The Python client against a real server on a free port: every method, sync and async."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import pytest

import nodeloom
from nodeloom.client import AsyncClient, Client, RunEvent, _config, errors
from nodeloom.schemas.workflows import WorkflowOut
from tests.client.conftest import Account, Live, greeting
from tests.runs_helpers import e, g, n


def delay_graph(seconds: float) -> dict[str, object]:
    return g(
        [n("in", "TextInput", text="hi"), n("wait", "Delay", seconds=seconds)], [e("in", "wait")]
    )


class TestAccount:
    def test_me_and_node_types(self, nl: Client, account: Account) -> None:
        me = nl.me()
        assert me.email == account.email and me.plan == "business"
        assert me.credits_balance == 1000
        types = {t.type: t for t in nl.node_types()}
        assert types["TextTemplate"].inputs[0].name == "text"

    def test_url_and_key_from_the_environment(
        self, live: Live, account: Account, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("NODELOOM_URL", live.url + "/")
        monkeypatch.setenv("NODELOOM_API_KEY", account.api_key)
        with Client() as client:
            assert client.base_url == live.url
            assert client.credential_source == "NODELOOM_API_KEY"
            assert client.me().email == account.email

    def test_then_the_stored_login(self, live: Live, account: Account) -> None:
        stored = _config.StoredLogin(live.url, account.email, account.api_key, "id")
        path = _config.save_login(stored)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        with Client() as client:
            assert client.base_url == live.url and client.me().email == account.email
            assert str(path) in client.credential_source


class TestWorkflows:
    def test_create_get_update_delete(self, nl: Client) -> None:
        created = nl.workflows.create({"name": "Greeting", "graph_json": greeting()})
        assert isinstance(created, WorkflowOut) and created.node_count == 2
        assert nl.workflows.get(created.id).graph_json == greeting()
        renamed = nl.workflows.update(created.id, name="Hello")
        assert renamed.name == "Hello" and renamed.graph_json == greeting()
        nl.workflows.delete(created.id)
        with pytest.raises(errors.NotFound):
            nl.workflows.get(created.id)

    def test_create_from_files(self, nl: Client, tmp_path: Path) -> None:
        full = tmp_path / "full.json"
        full.write_text(json.dumps({"name": "From file", "graph_json": greeting()}))
        bare = tmp_path / "bare-graph.json"
        bare.write_text(json.dumps(greeting()))
        assert nl.workflows.create(full).name == "From file"
        assert nl.workflows.create(str(bare)).name == "bare-graph"
        assert nl.workflows.create(bare, name="Named").name == "Named"

    def test_list_iterates_over_every_page(self, nl: Client) -> None:
        ids = [
            nl.workflows.create({"name": f"w{i}", "graph_json": greeting()}).id for i in range(5)
        ]
        listed = list(nl.workflows.list(page_size=2))
        assert [w.id for w in listed] == ids[::-1]  # newest first, across three pages

    def test_find_by_id_or_name(self, nl: Client) -> None:
        one = nl.workflows.create({"name": "Unique", "graph_json": greeting()})
        assert nl.workflows.find("Unique").id == one.id
        assert nl.workflows.find(one.id).name == "Unique"
        for _ in range(2):
            nl.workflows.create({"name": "Twice", "graph_json": greeting()})
        with pytest.raises(errors.AmbiguousWorkflow) as ambiguous:
            nl.workflows.find("Twice")
        assert len(ambiguous.value.ids) == 2
        with pytest.raises(errors.NotFound):
            nl.workflows.find("Nobody has this name")


class TestRuns:
    def test_execute_wait_over_websocket_and_outputs(self, nl: Client, tmp_path: Path) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        run = nl.workflows.execute(wf.id, {"text": "there"})
        assert run.workflow_id == wf.id and run.estimated_credits == 1
        seen: list[RunEvent] = []
        done = run.wait(timeout=30, on_event=seen.append)
        assert done.status == "completed" and done.credits_used == 1
        assert [ev.seq for ev in seen] == list(range(1, 7))
        assert seen[0].type == "run.started" and seen[-1].type == "run.completed"
        outputs = done.outputs()
        assert list(outputs) == ["tpl"] and outputs["tpl"].content_type == "text/plain"
        assert set(done.outputs(all_nodes=True)) == {"in", "tpl"}
        assert nl.artifacts.read(outputs["tpl"].id) == b"Hello there!"
        files = done.download(tmp_path / "out")
        assert files["tpl"] == tmp_path / "out" / "tpl.txt"
        assert files["tpl"].read_text() == "Hello there!"

    def test_wait_by_polling_derives_the_same_changes(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        seen: list[RunEvent] = []
        done = nl.workflows.execute(wf.id, {"text": "poll"}, cache=False).wait(
            timeout=30, on_event=seen.append, use_websocket=False, poll_interval=0.05
        )
        assert done.status == "completed"
        types = [(ev.type, ev.node_id) for ev in seen]
        assert types[0] == ("run.started", None) and types[-1] == ("run.completed", None)
        assert ("node.completed", "tpl") in types
        assert all(ev.seq is None for ev in seen)

    def test_wait_times_out_and_the_run_goes_on(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "slow", "graph_json": delay_graph(3)})
        run = nl.workflows.execute(wf.id)
        with pytest.raises(errors.WaitTimeout) as timed_out:
            run.wait(timeout=0.3)
        assert timed_out.value.run_id == run.id
        assert run.refresh().status == "running"
        run.cancel()
        cancelled = run.wait(timeout=30)
        assert cancelled.status == "cancelled" and cancelled.error is not None
        assert cancelled.error.code == "cancelled"
        with pytest.raises(errors.Conflict):
            nl.runs.cancel(wf.id, run.id)

    def test_idempotency_key_replays_the_first_run(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        first = nl.workflows.execute(wf.id, idempotency_key="same-key")
        again = nl.workflows.execute(wf.id, idempotency_key="same-key")
        assert again.id == first.id

    def test_retry_from_the_failed_node(self, nl: Client) -> None:
        graph = g(
            [
                n("in", "TextInput", text="x"),
                n("a", "TextTemplate", template="A {{ text }}"),
                n("bad", "TextTemplate", template="{{ 1 / 0 }}"),
            ],
            [e("in", "a"), e("a", "bad")],
        )
        wf = nl.workflows.create({"name": "retry", "graph_json": graph})
        failed = nl.workflows.execute(wf.id).wait(timeout=30)
        assert failed.status == "failed"
        retry = nl.runs.retry(wf.id, failed.id, params={"bad": {"template": "{{ text }}!"}})
        assert retry.retried_from == failed.id
        done = retry.wait(timeout=30)
        assert done.status == "completed" and done.credits_used == 1
        assert done.outputs()["bad"].size_bytes == len("A x!")
        assert [nr.cached for nr in done.node_runs] == [True, True, False]
        assert nl.runs.get(wf.id, failed.id).retries == [done.id]
        again = failed.retry(params={"bad": {"template": "B"}}).wait(timeout=30)
        assert again.status == "completed" and again.retried_from == failed.id
        with pytest.raises(errors.Conflict):
            nl.runs.retry(wf.id, again.id)

    def test_get_list_and_events(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        runs = [nl.workflows.execute(wf.id, {"text": str(i)}).wait(timeout=30) for i in range(3)]
        assert nl.runs.get(wf.id, runs[0].id).node_runs[1].status == "completed"
        listed = list(nl.runs.list(wf.id, page_size=2))
        assert [r.id for r in listed] == [r.id for r in reversed(runs)]
        assert list(nl.runs.list(wf.id, status="failed")) == []
        events = list(nl.runs.events(wf.id, runs[0].id))
        assert [ev.seq for ev in events] == list(range(1, 7))
        assert [ev.seq for ev in nl.runs.events(wf.id, runs[0].id, after_seq=4)] == [5, 6]

    def test_artifacts_metadata_and_download(self, nl: Client, tmp_path: Path) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        run = nl.workflows.execute(wf.id).wait(timeout=30)
        artifact_id = run.node_runs[1].artifact_id
        assert artifact_id is not None
        meta = nl.artifacts.metadata(artifact_id)
        assert meta.size_bytes == len(b"Hello world!") and meta.node_id == "tpl"
        into_dir = nl.artifacts.download(artifact_id, tmp_path)
        assert into_dir == tmp_path / f"{artifact_id}.txt"
        new_dir = nl.artifacts.download(artifact_id, f"{tmp_path}/new/")
        assert new_dir == tmp_path / "new" / f"{artifact_id}.txt"
        to_file = nl.artifacts.download(artifact_id, tmp_path / "sub" / "greeting.txt")
        assert to_file.read_bytes() == into_dir.read_bytes() == b"Hello world!"
        assert [p.name for p in (tmp_path / "sub").iterdir()] == ["greeting.txt"]
        umask = os.umask(0o022)
        os.umask(umask)
        assert stat.S_IMODE(to_file.stat().st_mode) == 0o666 & ~umask  # like any download


class TestOneLiner:
    def test_run_by_name_waits_and_returns_the_finished_run(
        self, nl: Client, live: Live, account: Account, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        nl.workflows.create({"name": "Greeting", "graph_json": greeting()})
        monkeypatch.setenv("NODELOOM_URL", live.url)
        monkeypatch.setenv("NODELOOM_API_KEY", account.api_key)
        run = nodeloom.run("Greeting", input={"text": "one-liner"})
        assert run.status == "completed"
        assert nl.artifacts.read(run.outputs()["tpl"].id) == b"Hello one-liner!"

    def test_a_failed_run_raises(self, nl: Client, live: Live, account: Account) -> None:
        broken = g([n("in", "TextInput", key="missing")], [])
        nl.workflows.create({"name": "Broken", "graph_json": broken})
        with pytest.raises(errors.RunFailed) as failed:
            nodeloom.run("Broken", {"other": 1}, url=live.url, api_key=account.api_key)
        assert failed.value.run.node_runs[0].status == "failed"
        assert "node in" in str(failed.value)


class TestWebhooksAndKeys:
    def test_webhooks(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        hook = nl.webhooks.create(wf.id, "orders")
        assert hook.active and hook.url.endswith(hook.token)
        assert [h.id for h in nl.webhooks.list(wf.id)] == [hook.id]
        assert not nl.webhooks.set_active(wf.id, hook.id, False).active
        trigger = f"/webhooks/{hook.token}"
        with pytest.raises(errors.WebhookInactive):
            nl.request("POST", trigger, json={"text": "x"}, auth=False)
        assert nl.webhooks.update(wf.id, hook.id, name="renamed", active=True).name == "renamed"
        accepted = nl.request("POST", trigger, json={"text": "x"}, auth=False)
        assert accepted.status_code == 202
        nl.webhooks.delete(wf.id, hook.id)
        assert list(nl.webhooks.list(wf.id)) == []

    def test_schedules(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        made = nl.schedules.create(
            wf.id, "mornings", "0 9 * * 1-5", timezone="Europe/Berlin", input={"text": "hi"}
        )
        assert made.active and made.next_run_at is not None and made.input == {"text": "hi"}
        assert [s.id for s in nl.schedules.list(wf.id)] == [made.id]
        paused = nl.schedules.set_active(wf.id, made.id, False)
        assert not paused.active and paused.next_run_at is None
        changed = nl.schedules.update(wf.id, made.id, cron="0 7 * * *", active=True)
        assert changed.cron == "0 7 * * *" and changed.next_run_at is not None
        assert nl.schedules.get(wf.id, made.id) == changed
        with pytest.raises(errors.InvalidRequest) as caught:
            nl.schedules.create(wf.id, "bad", "0 9 * * *", timezone="Nowhere/Never")
        assert caught.value.errors[0].pointer == "/timezone"
        nl.schedules.delete(wf.id, made.id)
        assert list(nl.schedules.list(wf.id)) == []

    def test_callbacks(self, nl: Client) -> None:
        wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
        with pytest.raises(errors.NotFound):
            nl.callbacks.secret_info()
        created = nl.callbacks.rotate_secret()
        assert created.secret.startswith("whsec_")
        assert nl.callbacks.secret_info().created_at == created.created_at
        with pytest.raises(errors.InvalidRequest) as caught:  # a private address
            nl.workflows.execute(wf.id, callback_url="http://10.1.2.3/hook")
        assert caught.value.errors[0].pointer == "/callback_url"
        run = nl.workflows.execute(wf.id).wait(timeout=30)
        assert nl.callbacks.deliveries(wf.id, run.id) == []

    def test_keys_need_a_login_token(self, live: Live, account: Account, nl: Client) -> None:
        with pytest.raises(errors.JwtRequired):
            nl.keys.list()
        with Client.login(live.url, account.email, account.password) as session:
            assert session.token_expires_at is not None
            created = session.keys.create("laptop")
            assert created.key.startswith("nlk_")
            assert "laptop" in [k.name for k in session.keys.list()]
            with Client(live.url, created.key) as by_key:
                assert by_key.me().email == account.email
                session.keys.revoke(created.id)
                with pytest.raises(errors.Unauthorized):
                    by_key.me()


class TestAsyncClient:
    async def test_same_methods_awaited(self, live: Live, account: Account) -> None:
        async with AsyncClient(live.url, account.api_key) as client:
            wf = await client.workflows.create({"name": "async", "graph_json": greeting()})
            assert [w.id async for w in client.workflows.list()] == [wf.id]
            run = await client.workflows.execute(wf.id, {"text": "async"})
            seen: list[str] = []
            done = await run.wait(30, on_event=lambda ev: seen.append(ev.type))
            assert done.status == "completed" and seen[-1] == "run.completed"
            outputs = await done.outputs()
            assert await client.artifacts.read(outputs["tpl"].id) == b"Hello async!"
            assert [ev.type async for ev in client.runs.events(wf.id, run.id)] == seen
            with pytest.raises(errors.NotFound):
                await client.runs.get(wf.id, str(uuid.uuid4()))


class TestBatches:
    GRAPH = g(
        [
            n("in", "TextInput"),
            n("each", "ForEach"),
            n("up", "TextTransform", operation="upper"),
            n("all", "Collect"),
        ],
        [e("in", "each"), e("each", "up"), e("up", "all")],
    )

    @pytest.mark.parametrize("use_websocket", [True, False])
    def test_item_events_and_outputs(self, nl: Client, use_websocket: bool) -> None:
        wf = nl.workflows.create({"name": "batch", "graph_json": self.GRAPH})
        seen: list[RunEvent] = []
        done = nl.workflows.execute(wf.id, {"text": "x\ny"}, cache=False).wait(
            timeout=30, on_event=seen.append, use_websocket=use_websocket, poll_interval=0.05
        )
        assert done.status == "completed"
        ups = [ev for ev in seen if ev.node_id == "up" and ev.type == "node.completed"]
        assert sorted(ev.data["item_index"] for ev in ups) == [0, 1]
        assert all(ev.data["item_count"] == 2 for ev in ups)
        assert [(nr.node_id, nr.item_index) for nr in done.node_runs if nr.node_id == "up"] == [
            ("up", 0),
            ("up", 1),
        ]
        assert list(done.outputs()) == ["all"]
        assert {"up.0", "up.1", "each", "each.0"} <= set(done.outputs(all_nodes=True))
        assert nl.artifacts.read(done.outputs(all_nodes=True)["up.1"].id) == b"Y"
