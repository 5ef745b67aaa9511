"""A Replicate model's input as a form, in a real browser against a real server and a fake of
Replicate's HTTP API on 127.0.0.1: a ReplicateModel node is given a replicate credential and
a model, its input then shows the model's own fields (from the model's published schema, in
its x-order), a field filled in lands in the node's input object when saved, and a model
Replicate does not know falls back to the JSON editor with Replicate's reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import api as api_client
from tests.e2e.conftest import enter, node, shot, token
from tests.providers.fakes import REPLICATE_TOKEN, FakeReplicate
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "models@example.com"
PASSWORD = "a long password"
NAME = "My Replicate"
FLUX = "black-forest-labs/flux-schnell"


@pytest.fixture(scope="module")
def replicate_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeReplicate]:
    fake = FakeReplicate(tmp_path_factory.mktemp("replicate"))
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, replicate_fake: FakeReplicate
) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("e2e-replicate"),
        env={
            "NODELOOM_HTTP_ALLOWLIST": '["127.0.0.1"]',
            "NODELOOM_REPLICATE_API_URL": replicate_fake.url + "/v1",
        },
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def model_graph(credential: str) -> dict[str, object]:
    return {
        "nodes": [
            {
                "id": "in",
                "type": "TextInput",
                "position": {"x": 0, "y": 0},
                "data": {"text": "a red fox"},
            },
            {
                "id": "gen",
                "type": "ReplicateModel",
                "position": {"x": 320, "y": 0},
                "data": {
                    "credential": credential,
                    "model": "nobody/nothing",
                    "bindings": {"prompt": "text"},
                },
            },
        ],
        "edges": [{"id": "e1", "source": "in", "target": "gen", "targetHandle": "text"}],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }


class TestReplicateModelForm:
    def test_pick_credential_and_model_and_fill_its_fields(
        self, page: Page, server: ServerProcess, replicate_fake: FakeReplicate, tmp_path: Path
    ) -> None:
        page.set_viewport_size({"width": 1280, "height": 900})
        enter(page, EMAIL, PASSWORD, "Sign up")
        with api_client(server, token(page)) as client:
            ids = []
            for name, secret in [("Revoked", "r8_revokedToken00000000"), (NAME, REPLICATE_TOKEN)]:
                made = client.post(
                    "/credentials",
                    json={"name": name, "kind": "replicate", "fields": {"api_token": secret}},
                )
                assert made.status_code == 201, made.text
                ids.append(made.json()["id"])
            revoked, credential = ids
            graph = model_graph(revoked)
            made = client.post("/workflows", json={"name": "Fox", "graph_json": graph})
            assert made.status_code == 201, made.text
            workflow = made.json()["id"]
        page.goto(f"/workflows/{workflow}")
        node(page, "Replicate model (image)").locator("header").click()
        details = page.get_by_role("complementary", name="Details")
        # A token Replicate refuses: its reason, and the input as raw JSON.
        expect(details).to_contain_text("cannot be read", timeout=10_000)
        expect(details).to_contain_text("Invalid token.")
        expect(details.get_by_label("Input")).to_be_visible()
        # The account's good credential: the model is still one Replicate does not know.
        details.get_by_role("combobox", name="Credential").select_option(credential)
        expect(details).to_contain_text("Not found.", timeout=10_000)
        expect(details.get_by_label("Input")).to_be_visible()
        details.get_by_label("Model", exact=True).fill(FLUX)

        form = details.get_by_role("group", name=f"{FLUX} input")
        expect(form).to_be_visible(timeout=10_000)
        labels = form.locator("label").all_inner_texts()
        # x-order: prompt (bound to the text input, so left out), aspect_ratio, num_outputs...
        assert labels[:4] == ["aspect_ratio", "Num Outputs", "Seed", "Go Fast"], labels
        expect(form).to_contain_text("inputs: prompt \u2190 text input")
        ratio = form.get_by_label("aspect_ratio")
        expect(ratio).to_have_value("1:1")
        ratio.select_option("16:9")
        form.get_by_label("Num Outputs").fill("2")
        shot(page, "62-editor-replicate-model-form-1280")
        assert REPLICATE_TOKEN not in page.content()
        page.get_by_role("button", name="Save", exact=True).click()
        expect(page.get_by_test_id("editor-banner")).to_contain_text("Saved.")

        with api_client(server, token(page)) as client:
            graph = client.get(f"/workflows/{workflow}").json()["graph_json"]
        [gen] = [n for n in graph["nodes"] if n["id"] == "gen"]
        assert gen["data"]["credential"] == credential
        assert gen["data"]["model"] == FLUX
        assert gen["data"]["input"] == {"aspect_ratio": "16:9", "num_outputs": 2}, json.dumps(
            gen["data"]
        )
        paths = [path for method, path, _h, _b in replicate_fake.requests if method == "GET"]
        assert f"/v1/models/{FLUX}" in paths
