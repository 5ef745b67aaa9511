"""Credentials and node packages in the web app, in a real browser against a real server: a
credential added on the profile page (listed with its hint, never its key), tested, rotated,
picked in an LLM text node's form, saved, deleted (then the workflow's warning on the node);
the palette's package filter and its provider nodes addable without the operator's provider.

A node whose package was uninstalled cannot be made through the API (the server refuses an
unknown type at save), so its placeholder is checked by the Vitest round trip
(web/src/graph/unknown.test.ts) rather than here."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import api as api_client
from tests.e2e.conftest import enter, new_tab, node, shot, token
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Browser, Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "keys@example.com"
PASSWORD = "a long password"
KEY = "sk-test-abcdefgh1234WXYZ"
ROTATED = "sk-rotated-000011112222"
NAME = "Local Ollama"
EMPTY = {"nodes": [], "edges": [], "viewport": {"x": 0, "y": 0, "zoom": 1}}


def api(server: ServerProcess, page: Page) -> httpx.Client:
    return api_client(server, token(page))


def llm_graph() -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
            {"id": "llm", "type": "LLMText", "position": {"x": 320, "y": 0}, "data": {}},
        ],
        "edges": [{"id": "e1", "source": "in", "target": "llm"}],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }


def saved_llm_data(server: ServerProcess, page: Page, workflow: str, want: Any) -> Any:
    """The LLM node's params as stored, once they equal ``want`` (a save is asynchronous)."""
    deadline = time.monotonic() + 10
    while True:
        with api(server, page) as client:
            saved = client.get(f"/workflows/{workflow}").json()
        [llm] = [n for n in saved["graph_json"]["nodes"] if n["id"] == "llm"]
        if llm["data"] == want or time.monotonic() > deadline:
            return llm["data"], saved["warnings"]
        time.sleep(0.1)


def credential_row(page: Page) -> Any:
    return page.get_by_role("table", name="Credentials").get_by_role("row").filter(has_text=NAME)


class TestCredentials:
    def test_add_one_and_see_only_its_hint(self, page: Page, server: ServerProcess) -> None:
        page.set_viewport_size({"width": 1280, "height": 900})
        enter(page, EMAIL, PASSWORD, "Sign up")
        page.goto("/profile")
        form = page.get_by_role("form", name="Add a credential")
        expect(form.get_by_label("Kind")).to_have_value("openai")
        expect(form).to_contain_text("never shown again")
        form.get_by_label("Name").fill(NAME)
        form.get_by_label("Base URL").fill("http://127.0.0.1:9/v1")
        key_input = form.get_by_label("API key")
        expect(key_input).to_have_attribute("type", "password")
        key_input.fill(KEY)
        # Another kind shows its own fields.
        form.get_by_label("Kind").select_option("http_header")
        expect(form.get_by_label("Header name")).to_be_visible()
        expect(form.get_by_label("Header value")).to_have_attribute("type", "password")
        form.get_by_label("Kind").select_option("openai")
        form.get_by_label("Base URL").fill("http://127.0.0.1:9/v1")
        form.get_by_label("API key").fill(KEY)
        form.get_by_role("button", name="Add credential").click()

        row = credential_row(page)
        expect(row).to_have_count(1)
        expect(row.get_by_test_id("credential-hint")).to_have_text("sk-…WXYZ")
        expect(row).to_contain_text("http://127.0.0.1:9/v1")
        expect(form.get_by_label("API key")).to_have_value("")
        assert KEY not in page.content()
        assert "abcdefgh1234" not in page.content()
        shot(page, "40-profile-credentials-1280")
        page.emulate_media(color_scheme="dark")
        shot(page, "41-profile-credentials-dark-1280")
        page.emulate_media(color_scheme="light")

        # The connection test reaches the server's answer: 127.0.0.1 is not a public address.
        row.get_by_role("button", name=f"Test connection of {NAME}").click()
        result = row.get_by_test_id("credential-test-result")
        expect(result).to_contain_text("Connection failed")
        with api(server, page) as client:
            [stored] = client.get("/credentials").json()
            tested = client.post(f"/credentials/{stored['id']}/test").json()
        assert tested["ok"] is False
        expect(result).to_contain_text(tested["message"])
        shot(page, "42-profile-credential-tested-1280")

    def test_rotate_its_secret(self, page: Page, server: ServerProcess) -> None:
        row = credential_row(page)
        row.get_by_role("button", name=f"Rotate secret of {NAME}").click()
        rotate = page.get_by_role("form", name=f"Rotate the secret of {NAME}")
        new_key = rotate.get_by_label("New API key")
        expect(new_key).to_be_focused()
        expect(new_key).to_have_attribute("type", "password")
        expect(rotate.get_by_role("button", name="Save new secret")).to_be_disabled()
        new_key.fill(ROTATED)
        rotate.get_by_role("button", name="Save new secret").click()
        expect(rotate).to_have_count(0)
        expect(row.get_by_role("button", name=f"Rotate secret of {NAME}")).to_be_focused()
        expect(row.get_by_test_id("credential-hint")).to_have_text("sk-…2222")
        expect(row).to_contain_text("http://127.0.0.1:9/v1")
        with api(server, page) as client:
            [stored] = client.get("/credentials").json()
        assert stored["hint"] == "sk-…2222"
        assert stored["fields"] == {"base_url": "http://127.0.0.1:9/v1"}

    def test_pick_it_in_an_llm_node_then_delete_it(self, page: Page, server: ServerProcess) -> None:
        with api(server, page) as client:
            [credential] = client.get("/credentials").json()
            made = client.post("/workflows", json={"name": "Ask", "graph_json": llm_graph()})
            assert made.status_code == 201, made.text
            workflow = made.json()["id"]
        page.goto(f"/workflows/{workflow}")
        # The palette offers LLM text even though this server has no default provider.
        palette = page.get_by_role("complementary", name="Node palette")
        llm_item = palette.get_by_role("button", name="Add LLM text", exact=True)
        expect(llm_item).not_to_have_attribute("aria-disabled", "true")
        expect(llm_item).to_have_accessible_description(re.compile("pick one of your credentials"))

        node(page, "LLM text").locator("header").click()
        details = page.get_by_role("complementary", name="Details")
        picker = details.get_by_role("combobox", name="Credential")
        expect(picker).to_have_value("")
        expect(picker.locator("option").first).to_have_text("Operator\u2019s default provider")
        expect(details.get_by_role("link", name="Add a credential")).to_have_attribute(
            "href", "/profile#credentials-heading"
        )
        picker.select_option(label=f"{NAME} (sk-…2222)")
        page.get_by_role("button", name="Save", exact=True).click()
        expect(page.get_by_test_id("editor-banner")).to_contain_text("Saved.")
        data, warnings = saved_llm_data(server, page, workflow, {"credential": credential["id"]})
        assert data == {"credential": credential["id"]}
        assert warnings == []
        shot(page, "43-editor-credential-picked-1280")

        # Back to the default provider removes the param rather than storing an empty string.
        picker.select_option("")
        page.keyboard.press("Control+s")
        data, warnings = saved_llm_data(server, page, workflow, {})
        assert data == {}
        assert [w["pointer"] for w in warnings] == ["/graph_json/nodes/1/type"]
        picker.select_option(credential["id"])
        page.keyboard.press("Control+s")
        data, _ = saved_llm_data(server, page, workflow, {"credential": credential["id"]})
        assert data == {"credential": credential["id"]}

        page.goto("/profile")
        credential_row(page).get_by_role("button", name=f"Delete {NAME}").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("will stop running")
        shot(page, "44-profile-credential-delete-1280")
        dialog.get_by_role("button", name="Delete credential").click()
        expect(credential_row(page)).to_have_count(0)
        expect(page.get_by_role("table", name="Credentials")).to_contain_text("No credentials yet")

        page.goto(f"/workflows/{workflow}")
        expect(page.get_by_test_id("editor-banner")).to_contain_text("This workflow has 1 warning")
        llm_node = node(page, "LLM text")
        expect(llm_node).to_have_class(re.compile(r"\bhas-warning\b"))
        expect(llm_node.get_by_role("note")).to_contain_text(credential["id"])
        expect(node(page, "Text input").get_by_role("note")).to_have_count(0)
        llm_node.locator("header").click()
        picker = page.get_by_role("complementary", name="Details").get_by_role(
            "combobox", name="Credential"
        )
        expect(picker).to_have_value(credential["id"])
        expect(picker.locator("option:checked")).to_contain_text("Missing credential")
        shot(page, "45-editor-credential-deleted-1280")
        page.emulate_media(color_scheme="dark")
        shot(page, "46-editor-credential-deleted-dark-1280")
        page.emulate_media(color_scheme="light")


class TestPackages:
    def test_palette_filters_by_package(self, page: Page, server: ServerProcess) -> None:
        with api(server, page) as client:
            catalog = client.get("/node-types").json()
        built_in = [t for t in catalog if t["package"] is None]
        packaged = [t for t in catalog if t["package"] is not None]
        with api(server, page) as client:
            made = client.post(
                "/workflows",
                json={"name": "Palette", "graph_json": EMPTY},
            )
            assert made.status_code == 201, made.text
        page.goto(f"/workflows/{made.json()['id']}")
        palette = page.get_by_role("complementary", name="Node palette")
        items = palette.locator(".palette-item")
        expect(items).to_have_count(len(catalog))
        choice = palette.get_by_label("Package")
        labels = choice.locator("option").all_inner_texts()
        names = sorted({t["package"]["name"] for t in packaged})
        assert labels[:2] == ["All", "Built-in"]
        assert len(labels) == 2 + len(names)
        choice.select_option(label="Built-in")
        expect(items).to_have_count(len(built_in))
        expect(palette.locator(".badge")).to_have_count(0)
        for name in names:
            choice.select_option(name)
            ours = [t for t in packaged if t["package"]["name"] == name]
            expect(items).to_have_count(len(ours))
            version = ours[0]["package"]["version"]
            expect(palette.locator(".badge").first).to_have_text(
                f"{ours[0]['package']['namespace']} {version}"
            )
        choice.select_option(label="All")
        expect(items).to_have_count(len(catalog))
        shot(page, "47-editor-palette-packages-1280")

    def test_profile_and_palette_at_390_wide(
        self, browser: Browser, server: ServerProcess, page: Page
    ) -> None:
        errors: list[str] = []
        phone = new_tab(
            browser, server, errors, viewport={"width": 390, "height": 844}, has_touch=True
        )
        try:
            enter(phone, EMAIL, PASSWORD)
            phone.goto("/profile")
            form = phone.get_by_role("form", name="Add a credential")
            form.get_by_label("Name").fill("Phone key")
            form.get_by_label("Base URL").fill("https://api.example.com/v1")
            form.get_by_label("API key").fill("sk-phone-0123456789abcd")
            form.get_by_role("button", name="Add credential").click()
            row = phone.get_by_role("table", name="Credentials").get_by_role("row")
            row = row.filter(has_text="Phone key")
            expect(row.get_by_role("button", name="Delete Phone key")).to_be_in_viewport()
            # Nothing wider than the screen.
            wide = phone.evaluate("() => document.documentElement.scrollWidth")
            assert wide <= 390, wide
            row.scroll_into_view_if_needed()
            shot(phone, "48-profile-credentials-390")
            # The palette drawer with its package filter, and the credential picker, on a phone.
            with api(server, phone) as client:
                [ask] = [w for w in client.get("/workflows").json() if w["name"] == "Ask"]
            phone.goto(f"/workflows/{ask['id']}")
            toolbar = phone.get_by_role("toolbar", name="Editor")
            toolbar.get_by_role("button", name="Nodes").click()
            palette = phone.get_by_role("complementary", name="Node palette")
            expect(palette.get_by_label("Package")).to_be_in_viewport()
            shot(phone, "49-editor-palette-390")
            palette.get_by_role("button", name="Close").click()
            toolbar.get_by_role("button", name="Fit view").click()
            node(phone, "LLM text").locator("header").tap()
            toolbar.get_by_role("button", name="Details").click()
            picker = phone.get_by_role("complementary", name="Details").get_by_label("Credential")
            picker.scroll_into_view_if_needed()
            expect(picker).to_be_in_viewport()
            shot(phone, "49-editor-credential-picker-390")
        finally:
            phone.context.close()
        assert not errors, errors
