"""Importing a ComfyUI workflow in the web editor, in a real browser against a real server:
pasting ComfyUI's Export (API) JSON adds a ComfyUIWorkflow node with its bindings proposed,
its credential picker offers the account's comfyui credentials only, and the node saves as
proposed; pasting the UI format explains how to export the API one."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.comfyui_fake import SDXL_WORKFLOW
from tests.e2e.conftest import api, enter, node, shot, token
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMPTY = {"nodes": [], "edges": [], "viewport": {"x": 0, "y": 0, "zoom": 1}}


def paste(page: Page, text: str) -> None:
    """What Ctrl+V delivers: a paste event carrying the clipboard's text."""
    page.evaluate(
        """(text) => {
            const data = new DataTransfer();
            data.setData("text/plain", text);
            document.body.dispatchEvent(
                new ClipboardEvent("paste", { clipboardData: data, bubbles: true }),
            );
        }""",
        text,
    )


def saved_nodes(server: ServerProcess, page: Page, workflow: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        with api(server, token(page)) as client:
            nodes: list[dict[str, Any]] = client.get(f"/workflows/{workflow}").json()["graph_json"][
                "nodes"
            ]
        if (nodes and nodes[0]["data"].get("credential")) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.1)


class TestComfyUIImport:
    def test_paste_an_api_export_then_pick_the_credential(
        self, page: Page, server: ServerProcess
    ) -> None:
        page.set_viewport_size({"width": 1280, "height": 900})
        enter(page, "comfy@example.com", "a long password", "Sign up")
        with api(server, token(page)) as client:
            made = client.post(
                "/credentials",
                json={
                    "name": "GPU box",
                    "kind": "comfyui",
                    "fields": {"base_url": "http://127.0.0.1:9"},
                },
            )
            assert made.status_code == 201, made.text
            credential = made.json()["id"]
            client.post(
                "/credentials",
                json={
                    "name": "Ollama",
                    "kind": "openai",
                    "fields": {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-x"},
                },
            )
            workflow = client.post("/workflows", json={"name": "Comfy", "graph_json": EMPTY})
            workflow_id = workflow.json()["id"]
        page.goto(f"/workflows/{workflow_id}")
        expect(page.get_by_role("button", name="Save", exact=True)).to_be_visible()

        paste(page, json.dumps({"last_node_id": 9, "nodes": [{"id": 3}], "links": []}))
        expect(page.get_by_role("status").filter(has_text="Export (API)")).to_be_visible()
        expect(node(page, "ComfyUI workflow")).to_have_count(0)

        paste(page, json.dumps(SDXL_WORKFLOW, indent=2))
        comfy = node(page, "ComfyUI workflow")
        expect(comfy).to_have_count(1)
        expect(page.get_by_role("status").filter(has_text="3 bindings proposed")).to_be_visible()
        shot(page, "60-editor-comfyui-imported-1280")

        comfy.locator("header").click()
        details = page.get_by_role("complementary", name="Details")
        picker = details.get_by_role("combobox", name="Credential")
        expect(picker.locator("option")).to_have_count(2)  # the comfyui one only
        expect(picker.locator("option").first).to_have_text("Choose a credential")
        picker.select_option(label="GPU box (…)")
        page.keyboard.press("Control+s")
        expect(page.get_by_role("status").filter(has_text="Saved.")).to_be_visible()

        (saved,) = saved_nodes(server, page, workflow_id)
        assert saved["type"] == "ComfyUIWorkflow"
        assert saved["data"] == {
            "workflow": SDXL_WORKFLOW,
            "bindings": [
                {"source": "text1", "node": "6", "input": "text", "type": "text"},
                {"source": "text2", "node": "7", "input": "text", "type": "text"},
                {"source": "text3", "node": "3", "input": "seed", "type": "number"},
            ],
            "output": {"node": "9", "index": 0},
            "credential": credential,
        }
