"""The gallery of public apps and a published app's page in a real browser, as a visitor
with no account, on a phone (390 wide) and a desktop: the gallery lists the public app and
not the link-only one, its card opens the app, the app runs and shows its poster, and
neither page is wider than the phone's screen. The screenshots of the app's page are the
ones docs/apps.md shows: with ``NODELOOM_DOCS_SCREENSHOTS=1`` they are written to
docs/screenshots/ as well as to test-artifacts/screenshots/."""

from __future__ import annotations

import io
import os
from typing import Any

import httpx
import pytest
from PIL import Image, ImageDraw

from tests.e2e.conftest import REPO, new_tab, shot
from tests.e2e.test_workflow_app import owner_key  # noqa: F401 (a fixture)
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

DOCS_SCREENSHOTS = REPO / "docs" / "screenshots"
POSTER: dict[str, Any] = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
         "data": {"key": "headline", "text": "Summer sale"}},
        {"id": "caption", "type": "TextTemplate", "position": {"x": 300, "y": 0},
         "data": {"template": "{{ text }} — this week only, in every shop."}},
        {"id": "poster", "type": "RenderText", "position": {"x": 300, "y": 200},
         "data": {"width": 960, "height": 540, "background": "#1e3a8a", "color": "#fde68a"}},
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "caption"},
        {"id": "e2", "source": "in", "target": "poster"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}  # fmt: skip


def cover_png() -> bytes:
    """A banner for the app's cover: a gradient with a few shapes."""
    image = Image.new("RGB", (1200, 400))
    draw = ImageDraw.Draw(image)
    for x in range(1200):
        draw.line([(x, 0), (x, 400)], fill=(30 + x // 12, 58 + x // 20, 138 - x // 20))
    for i, (cx, cy, r) in enumerate([(200, 120, 90), (620, 260, 140), (1020, 110, 70)]):
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(253, 230 - 30 * i, 138))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def doc_shot(tab: Any, name: str) -> None:
    """A screenshot for the test's artifacts, and for the docs (the whole page) when asked."""
    shot(tab, name)
    if os.environ.get("NODELOOM_DOCS_SCREENSHOTS") == "1":
        tab.screenshot(path=str(DOCS_SCREENSHOTS / f"{name}.png"), full_page=True)


def fits(tab: Any, width: int) -> None:
    scroll = tab.evaluate("() => document.documentElement.scrollWidth")
    assert scroll <= width, scroll


def test_the_gallery_and_a_published_app_on_a_phone_and_a_desktop(
    browser: Any,
    server: ServerProcess,
    owner_key: str,  # noqa: F811 (the fixture imported above)
) -> None:
    with httpx.Client(
        base_url=f"{server.base_url}/api/v1",
        headers={"Authorization": f"Bearer {owner_key}"},
        timeout=30,
    ) as http:
        upload = http.post("/uploads", files={"file": ("cover.png", cover_png(), "image/png")})
        assert upload.status_code == 201, upload.text
        wf = http.post("/workflows", json={"name": "poster", "graph_json": POSTER}).json()["id"]
        common = {
            "workflow_id": wf,
            "inputs": [
                {"key": "headline", "label": "Headline", "help": "At most 40 characters",
                 "default": "Summer sale", "max_length": 40},
            ],
            "outputs": [
                {"node_id": "poster", "label": "Your poster"},
                {"node_id": "caption", "label": "Caption"},
            ],
        }  # fmt: skip
        r = http.post(
            "/apps",
            json={
                **common,
                "title": "Poster maker",
                "description": "Type a headline, get a poster and a caption for it.",
                "cover_asset_id": upload.json()["id"],
                "access": "public",
            },
        )
        assert r.status_code == 201, r.text
        app = r.json()
        r = http.post("/apps", json={**common, "title": "Only by link", "access": "link"})
        assert r.status_code == 201, r.text

    errors: list[str] = []
    phone = new_tab(browser, server, errors, viewport={"width": 390, "height": 844})
    answer = phone.goto("/gallery")
    assert answer is not None and answer.status == 200
    expect(phone.get_by_role("heading", name="Apps")).to_be_visible()
    card = phone.get_by_role("link", name="Poster maker")
    expect(card).to_be_visible()
    expect(phone.get_by_text("Only by link")).to_have_count(0)
    expect(phone.locator(".app-gallery img")).to_have_count(1)
    fits(phone, 390)
    doc_shot(phone, "app-gallery-phone")
    card.click()
    phone.wait_for_url(f"**/apps/{app['slug']}")
    expect(phone.get_by_role("heading", name="Poster maker")).to_be_visible()
    phone.get_by_label("Headline").fill("Autumn sale")
    phone.get_by_role("button", name="Run").click()
    result = phone.locator(".app-run[data-status='completed']")
    expect(result).to_be_visible(timeout=60_000)
    expect(result.get_by_text("Autumn sale — this week only")).to_be_visible()
    poster = result.get_by_role("img", name="Your poster")
    expect(poster).to_be_visible()
    assert poster.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [960, 540]
    fits(phone, 390)
    doc_shot(phone, "app-phone")

    desktop = new_tab(browser, server, errors, viewport={"width": 1280, "height": 900})
    desktop.goto(f"/apps/{app['slug']}")
    desktop.get_by_label("Headline").fill("Winter sale")
    desktop.get_by_role("button", name="Run").click()
    expect(
        desktop.locator(".app-run[data-status='completed']").get_by_text("Winter sale")
    ).to_be_visible(timeout=60_000)
    doc_shot(desktop, "app-desktop")
    desktop.goto("/gallery")
    expect(desktop.get_by_role("link", name="Poster maker")).to_be_visible()
    shot(desktop, "app-gallery-desktop")
    for tab in (phone, desktop):
        tab.context.close()
    assert not errors, errors
