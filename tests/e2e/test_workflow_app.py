"""A workflow app in a real browser, as a visitor with no account, on a phone-sized screen:
open the link, fill the form, upload a photo, run, watch it end, see the outputs, download
one. The page is the small app entry (no editor code) and carries the app's embedding
allowlist as CSP frame-ancestors."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.conftest import PASSWORD
from tests.e2e.conftest import api, enter, new_tab, open_new_workflow, shot, token
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

GRAPH: dict[str, Any] = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
         "data": {"key": "name", "text": "world"}},
        {"id": "hello", "type": "TextTemplate", "position": {"x": 300, "y": 0},
         "data": {"template": "Hello {{ text }}!"}},
        {"id": "photo", "type": "ImageInput", "position": {"x": 0, "y": 200},
         "data": {"key": "photo"}},
        {"id": "small", "type": "ImageResize", "position": {"x": 300, "y": 200},
         "data": {"width": 64, "height": 48}},
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "hello"},
        {"id": "e2", "source": "photo", "target": "small"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}  # fmt: skip


OWNER = "app-owner@example.com"


@pytest.fixture(scope="module")
def owner_key(server: ServerProcess) -> str:
    """An API key of the account that publishes the apps (the server's first account: later
    sign-ups are closed)."""
    with httpx.Client(base_url=f"{server.base_url}/api/v1", timeout=10) as http:
        assert http.post("/auth/signup", json={"email": OWNER, "password": PASSWORD}).is_success
        jwt = http.post("/auth/login", json={"email": OWNER, "password": PASSWORD}).json()
        r = http.post(
            "/api-keys",
            json={"name": "k"},
            headers={"Authorization": f"Bearer {jwt['access_token']}"},
        )
        return str(r.json()["key"])


def photo(path: Path) -> Path:
    buffer = io.BytesIO()
    Image.new("RGB", (320, 240), (200, 80, 40)).save(buffer, format="JPEG")
    path.write_bytes(buffer.getvalue())
    return path


def test_a_visitor_runs_an_app_on_a_phone(
    browser: Any, server: ServerProcess, owner_key: str, tmp_path: Path
) -> None:
    key = owner_key
    with httpx.Client(
        base_url=f"{server.base_url}/api/v1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    ) as http:
        wf = http.post("/workflows", json={"name": "poster", "graph_json": GRAPH}).json()["id"]
        r = http.post(
            "/apps",
            json={
                "workflow_id": wf,
                "title": "Say hello",
                "description": "Type your name and add a photo.",
                "inputs": [
                    {"key": "name", "label": "Your name", "help": "Any name will do"},
                    {"key": "photo", "label": "A photo"},
                ],
                "outputs": [
                    {"node_id": "hello", "label": "Greeting"},
                    {"node_id": "small", "label": "Thumbnail"},
                ],
                "frame_ancestors": ["https://shop.example.com"],
            },
        )
        assert r.status_code == 201, r.text
        app = r.json()
    errors: list[str] = []
    tab = new_tab(
        browser,
        server,
        errors,
        # A phone-sized window (Chromium's mobile emulation is left out: its layout and
        # visual viewports disagree and its clicks then land beside their target).
        viewport={"width": 390, "height": 844},
        accept_downloads=True,
    )
    loaded: list[str] = []
    tab.on("request", lambda req: loaded.append(req.url))
    answer = tab.goto(f"/apps/{app['slug']}")
    assert answer is not None and answer.status == 200
    policy = answer.headers["content-security-policy"]
    assert "frame-ancestors https://shop.example.com" in policy
    assert "x-frame-options" not in answer.headers
    expect(tab.get_by_role("heading", name="Say hello")).to_be_visible()
    # The visitor's page loads its own entry, never the editor's.
    assert not any("/assets/main-" in url for url in loaded), loaded
    tab.get_by_label("Your name").fill("Ada")
    tab.get_by_label("A photo").set_input_files(str(photo(tmp_path / "me.jpg")))
    tab.get_by_role("button", name="Run").click()
    result = tab.locator(".app-run[data-status='completed']")
    expect(result).to_be_visible(timeout=60_000)
    expect(result.get_by_text("Hello Ada!")).to_be_visible()
    thumbnail = result.get_by_role("img", name="Thumbnail")
    expect(thumbnail).to_be_visible()
    size = thumbnail.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert size == [64, 48]
    shot(tab, "app-phone")
    width = tab.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
    assert width[0] <= width[1], width  # nothing wider than the phone's screen
    with tab.expect_download() as download_info:
        result.get_by_role("link", name="Download").nth(1).click()
    saved = tmp_path / "thumb.png"
    download_info.value.save_as(saved)
    with Image.open(saved) as image:
        assert image.size == (64, 48)
    # Reloaded, the page shows the visitor's run again (kept in this browser).
    tab.reload()
    expect(
        tab.locator(".app-run[data-status='completed']").get_by_text("Hello Ada!")
    ).to_be_visible()
    # Unpublished: the page says so, with status 404.
    with httpx.Client(
        base_url=f"{server.base_url}/api/v1", headers={"Authorization": f"Bearer {key}"}
    ) as http:
        assert http.patch(f"/apps/{app['id']}", json={"published": False}).is_success
    gone = tab.goto(f"/apps/{app['slug']}")
    assert gone is not None and gone.status == 404
    expect(tab.get_by_role("heading", name="This app is not available")).to_be_visible()
    tab.context.close()
    assert not errors, errors


def greeting(template: str) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
             "data": {"key": "name", "text": "world"}},
            {"id": "hello", "type": "TextTemplate", "position": {"x": 300, "y": 0},
             "data": {"template": template}},
        ],
        "edges": [{"id": "e1", "source": "in", "target": "hello"}],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }  # fmt: skip


def visitor_runs(tab: Any, url: str, name: str) -> Any:
    """Open the app's link as a visitor, run it with ``name``; the finished run's section."""
    tab.goto(url)
    tab.get_by_label("Your name").fill(name)
    tab.get_by_role("button", name="Run").click()
    result = tab.locator(".app-run[data-status='completed']")
    expect(result).to_be_visible(timeout=60_000)
    return result


def test_an_owner_publishes_through_the_dialog(
    browser: Any, page: Any, server: ServerProcess, owner_key: str
) -> None:
    enter(page, OWNER, PASSWORD)
    wf = open_new_workflow(page, server, "Greeter", greeting("Hello {{ text }}!"), "in")

    page.get_by_role("button", name="Publish as app").click()
    dialog = page.get_by_role("dialog", name="Publish as app")
    dialog.get_by_label("Title").fill("Say hello")
    dialog.get_by_label("Description").fill("Type your name.")
    field = dialog.locator(".publish-item[data-key='name']")
    field.get_by_label("Label").fill("Your name")
    field.get_by_label("Help text").fill("Any name will do")
    field.get_by_label("Longest text").fill("40")
    output = dialog.locator(".publish-item[data-node='hello']")
    expect(output.get_by_role("checkbox")).to_be_checked()  # the graph's end, shown
    output.get_by_label("Label").fill("Greeting")
    dialog.get_by_label("Anyone with the link").check()
    dialog.get_by_label("Credits per day").fill("100")
    dialog.get_by_label("Proof of work (bits)").fill("10")
    dialog.get_by_role("button", name="Publish version 1").click()
    link = dialog.get_by_test_id("app-link")
    expect(link).to_be_visible()
    url = link.get_attribute("href")
    assert url is not None and "/apps/" in url
    shot(page, "app-publish-dialog")
    with api(server, token(page)) as client:
        (app,) = client.get("/apps", params={"workflow_id": wf}).json()
    assert app["title"] == "Say hello" and app["challenge_bits"] == 10
    assert app["inputs"][0]["label"] == "Your name" and app["inputs"][0]["max_length"] == 40
    assert app["outputs"] == [{"node_id": "hello", "label": "Greeting"}]
    assert app["budget_daily"] == 100 and app["access"] == "link"
    dialog.get_by_role("button", name="Close").click()

    # A visitor with no account: the page solves the proof of work and runs the app.
    errors: list[str] = []
    visitor = new_tab(browser, server, errors, viewport={"width": 390, "height": 844})
    result = visitor_runs(visitor, url, "Ada")
    expect(result.get_by_text("Hello Ada!")).to_be_visible(timeout=60_000)
    # The next run needs a new challenge, which the page fetches and solves.
    visitor.get_by_label("Your name").fill("Bea")
    visitor.get_by_role("button", name="Run").click()
    expect(
        visitor.locator(".app-run[data-status='completed']").get_by_text("Hello Bea!")
    ).to_be_visible(timeout=60_000)

    # The owner's Apps page lists it, with what it spent.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Apps").click()
    table = page.get_by_test_id("apps-table")
    expect(table).to_contain_text("Say hello")
    expect(table).to_contain_text(url)
    shot(page, "app-list")

    # The workflow changes: the app keeps version 1 until the owner moves it.
    with api(server, token(page)) as client:
        r = client.patch(
            f"/workflows/{wf}",
            json={"graph_json": greeting("Goodbye {{ text }}!")},
            headers={"If-Match": '"v1"'},
        )
        assert r.status_code == 200, r.text
    expect(visitor_runs(visitor, url, "Cy").get_by_text("Hello Cy!")).to_be_visible(timeout=60_000)
    page.goto(f"/workflows/{wf}")
    expect(page.get_by_test_id("save-state")).to_contain_text("version 2")
    page.get_by_role("button", name="Publish as app").click()
    expect(dialog.get_by_label("Title")).to_have_value("Say hello")
    dialog.get_by_role("button", name="Move to version 2").click()
    expect(dialog.get_by_test_id("published-app")).to_contain_text("runs version 2")
    expect(visitor_runs(visitor, url, "Di").get_by_text("Goodbye Di!")).to_be_visible(
        timeout=60_000
    )

    # Unpublished: the visitor's page says so; published again, it works again; deleted.
    dialog.get_by_role("button", name="Unpublish").click()
    expect(dialog.get_by_role("button", name="Publish again")).to_be_visible()
    gone = visitor.goto(url)
    assert gone is not None and gone.status == 404
    dialog.get_by_role("button", name="Publish again").click()
    expect(dialog.get_by_role("button", name="Unpublish")).to_be_visible()
    assert (ok := visitor.goto(url)) is not None and ok.status == 200
    dialog.get_by_role("button", name="Delete app").click()
    dialog.get_by_role("button", name="Delete for good").click()
    expect(dialog.get_by_test_id("published-app")).to_have_count(0)
    gone = visitor.goto(url)
    assert gone is not None and gone.status == 404
    visitor.context.close()
    assert not errors, errors
