"""A workflow saved while a node package was installed, opened after it was removed: the
palette showed the package's badge and filter while it was there (and a type of a package
refused for its SDK range greyed, with its reason, not addable), and the canvas draws its node
as an "Unknown node" placeholder that keeps its params.

The package is the repository's watermark example, made visible to the server process by
``PYTHONPATH`` with a hand-written ``dist-info`` (its entry point), so the test needs no pip
and leaves this interpreter's environment as it was."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import enter, new_tab, shot
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Browser, Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/node-packages/nodeloom-watermark"
EMAIL = "studio@example.com"
PASSWORD = "a long password"
PARAMS = {"text": "© studio", "opacity": 0.4}


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(EXAMPLE / "src" / "nodeloom_watermark", site / "nodeloom_watermark")
    info = site / "nodeloom_watermark-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nodeloom-watermark\nVersion: 0.1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[nodeloom.nodes]\nwatermark = nodeloom_watermark:package\n", encoding="utf-8"
    )
    # The same node built for an SDK this server does not have: listed, but unavailable.
    future = site / "nodeloom_future"
    shutil.copytree(EXAMPLE / "src" / "nodeloom_watermark", future)
    module = future / "__init__.py"
    source = module.read_text(encoding="utf-8")
    assert 'sdk=">=1.0,<2"' in source
    module.write_text(source.replace('sdk=">=1.0,<2"', 'sdk=">=9,<10"'), encoding="utf-8")
    info = site / "nodeloom_future-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nodeloom-future\nVersion: 0.2.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[nodeloom.nodes]\nfuture = nodeloom_future:package\n", encoding="utf-8"
    )
    return site


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("unknown-node")


def client(server: ServerProcess, tab: Page) -> httpx.Client:
    jwt = tab.evaluate("() => JSON.parse(sessionStorage.getItem('nodeloom.session')).token")
    return httpx.Client(
        base_url=f"{server.base_url}/api/v1",
        headers={"Authorization": f"Bearer {jwt}"},
        timeout=10,
    )


def graph(type_name: str) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "bg", "type": "GradientBackground", "position": {"x": 0, "y": 0}, "data": {}},
            {
                "id": "mark",
                "type": type_name,
                "position": {"x": 320, "y": 0},
                "data": PARAMS,
                "width": 200,
            },
        ],
        "edges": [{"id": "e1", "source": "bg", "target": "mark", "targetHandle": "image"}],
        "viewport": {"x": 20, "y": 40, "zoom": 1},
    }


class TestPackageRemoved:
    def test_badge_while_installed_then_placeholder(
        self, browser: Browser, site_dir: Path, data_dir: Path
    ) -> None:
        errors: list[str] = []
        # 1. With the package: its types carry a badge and have a filter entry.
        server = ServerProcess(data_dir, env={"PYTHONPATH": str(site_dir)})
        server.start()
        try:
            tab = new_tab(browser, server, errors, viewport={"width": 1280, "height": 900})
            enter(tab, EMAIL, PASSWORD, "Sign up")
            with client(server, tab) as api:
                catalog = api.get("/node-types").json()
                [mark] = [
                    t for t in catalog if (t["package"] or {}).get("namespace") == "watermark"
                ]
                assert mark["package"] == {
                    "name": "nodeloom-watermark",
                    "version": "0.1.0",
                    "namespace": "watermark",
                }
                made = api.post(
                    "/workflows", json={"name": "Stamp", "graph_json": graph(mark["type"])}
                )
                assert made.status_code == 201, made.text
                workflow = made.json()["id"]
                stored = made.json()["graph_json"]
            tab.goto(f"/workflows/{workflow}")
            palette = tab.get_by_role("complementary", name="Node palette")
            palette.get_by_label("Package").select_option("nodeloom-watermark")
            item = palette.locator(f'[data-node-type="{mark["type"]}"]')
            expect(palette.locator(".palette-item")).to_have_count(1)
            expect(item.locator(".badge")).to_have_text("watermark 0.1.0")
            shot(tab, "50-editor-palette-package-installed-1280")
            # A type of a refused package: greyed, its reason said, not addable.
            with client(server, tab) as api:
                [later] = [
                    t for t in api.get("/node-types").json() if t["type"] == "future.Watermark"
                ]
            assert later["status"] == "unavailable"
            palette.get_by_label("Package").select_option("nodeloom-future")
            refused = palette.get_by_role("button", name="Add Watermark")
            expect(refused).to_have_attribute("aria-disabled", "true")
            expect(refused).to_have_accessible_description(later["unavailable_reason"])
            expect(refused.locator(".badge")).to_have_text("future 0.2.0")
            refused.focus()
            tab.keyboard.press("Enter")
            expect(tab.get_by_role("group", name="Watermark")).to_have_count(1)
            shot(tab, "54-editor-palette-unavailable-1280")
            tab.context.close()
        finally:
            server.stop()

        # 2. Without it (uninstalled): the same data directory, a server without the package.
        server = ServerProcess(data_dir)
        server.start()
        try:
            tab = new_tab(browser, server, errors, viewport={"width": 1280, "height": 900})
            enter(tab, EMAIL, PASSWORD)
            with client(server, tab) as api:
                assert mark["type"] not in {t["type"] for t in api.get("/node-types").json()}
                before = api.get(f"/workflows/{workflow}").json()
            assert before["graph_json"] == stored
            tab.goto(f"/workflows/{workflow}")
            placeholder = tab.get_by_role("group", name=f"Unknown node ({mark['type']})")
            expect(placeholder).to_be_visible()
            expect(placeholder).to_have_attribute("data-unknown", "true")
            # The server's warning says why, on the node.
            expect(placeholder.get_by_role("note")).to_contain_text("is not installed")
            # Its stored edge is still drawn.
            expect(tab.locator(".react-flow__edge")).to_have_count(1)
            placeholder.locator("header").click()
            details = tab.get_by_role("complementary", name="Details")
            expect(details.get_by_role("heading", name=re.compile("Unknown node"))).to_be_visible()
            expect(details).to_contain_text("node package is not installed on this server")
            expect(details.get_by_label("Parameters")).to_contain_text('"opacity": 0.4')
            shot(tab, "51-editor-unknown-node-1280")
            tab.emulate_media(color_scheme="dark")
            shot(tab, "52-editor-unknown-node-dark-1280")
            tab.emulate_media(color_scheme="light")

            # Saved unchanged: whatever the server answers, the node goes out exactly as stored.
            sent: list[dict[str, Any]] = []
            tab.on(
                "request",
                lambda r: (
                    sent.append(r.post_data_json)
                    if r.method == "PATCH" and f"/workflows/{workflow}" in r.url
                    else None
                ),
            )
            tab.get_by_role("button", name="Save", exact=True).click()
            expect(tab.get_by_test_id("editor-banner")).to_be_visible()
            assert sent, "the save sent nothing"
            assert sent[-1]["graph_json"]["nodes"] == stored["nodes"]
            assert sent[-1]["graph_json"]["edges"] == stored["edges"]
            with client(server, tab) as api:
                after = api.get(f"/workflows/{workflow}").json()
            assert after["graph_json"]["nodes"] == stored["nodes"]
            shot(tab, "53-editor-unknown-node-saved-1280")
            tab.context.close()
        finally:
            server.stop()
        assert not errors, errors
