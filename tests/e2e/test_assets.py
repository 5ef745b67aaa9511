"""Issue 33 in a real browser against a real server: the Assets page (upload by button and by
dropping files, with progress, the thumbnail, the quota, delete), a photo dropped on the
editor's canvas becoming an Image input node bound to its upload, and the run dialog's picker
(the node's asset, another asset, or a file uploaded there) feeding a run."""

from __future__ import annotations

import base64
import io
import time
import wave
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.e2e.conftest import api, enter, node, shot, token, wait_for_run
from tests.e2e.test_browser import connect, drag_from_palette
from tests.media_files import jpeg_with_gps
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "assets@example.com"
PASSWORD = "a long password"


def drop_files(
    page: Page, selector: str, files: list[tuple[str, str, bytes]], x: int, y: int
) -> None:
    """What a file dragged from the desktop delivers: dragenter, dragover and drop events
    whose DataTransfer holds the files, at (x, y) in the element."""
    page.evaluate(
        """([selector, files, x, y]) => {
            const target = document.querySelector(selector);
            const box = target.getBoundingClientRect();
            const data = new DataTransfer();
            for (const [name, type, b64] of files) {
                const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
                data.items.add(new File([bytes], name, { type }));
            }
            const at = { clientX: box.left + x, clientY: box.top + y };
            for (const kind of ["dragenter", "dragover", "drop"]) {
                const init = { dataTransfer: data, bubbles: true, cancelable: true, ...at };
                target.dispatchEvent(new DragEvent(kind, init));
            }
        }""",
        [selector, [[n, t, base64.b64encode(b).decode()] for n, t, b in files], x, y],
    )


def noise(fmt: str, size: tuple[int, int], seed: int) -> bytes:
    """A picture no other test makes (so no upload dedupes into another)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def card(page: Page, name: str) -> Any:
    return page.get_by_role("list", name="Assets").get_by_role("listitem").filter(has_text=name)


def test_the_assets_page(page: Page, server: ServerProcess) -> None:
    enter(page, EMAIL, PASSWORD, "Sign up")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Assets").click()
    expect(page.get_by_role("heading", name="Assets")).to_be_visible()
    expect(page.get_by_text("No assets yet")).to_be_visible()
    expect(page.get_by_test_id("storage")).to_contain_text("0 B of 4.88 TB used")

    # By the button: a JPEG with GPS EXIF becomes a PNG asset with a thumbnail.
    page.get_by_label("Files to upload").set_input_files(
        files=[{"name": "holiday.jpg", "mimeType": "image/jpeg", "buffer": jpeg_with_gps()}]
    )
    holiday = card(page, "holiday.jpg")
    expect(holiday).to_contain_text("image · 64\u00d748")
    thumbnail = holiday.get_by_role("img", name="holiday.jpg")
    expect(thumbnail).to_be_visible()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.asset-card img')].every((i) => i.naturalWidth > 0)"
    )
    expect(page.get_by_test_id("storage")).not_to_contain_text("0 B of")

    # By dropping two files on the page; each shows its progress while it goes.
    big = noise("PNG", (1200, 900), 1)
    drop_files(
        page,
        ".assets-page",
        [("noise.png", "image/png", big), ("again.jpg", "image/jpeg", jpeg_with_gps())],
        200,
        200,
    )
    expect(card(page, "noise.png")).to_contain_text("1200\u00d7900")
    # The same content again is the asset the account already has.
    expect(page.get_by_role("status").filter(has_text="Already in your assets")).to_contain_text(
        "holiday.jpg"
    )
    expect(page.get_by_role("list", name="Assets").get_by_role("listitem")).to_have_count(2)
    shot(page, "assets-page")

    # Something that is no media: refused with the server's reason, kept in the list.
    page.get_by_label("Files to upload").set_input_files(
        files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"just some text\n"}]
    )
    uploads = page.get_by_role("list", name="Uploads")
    expect(uploads.get_by_role("alert")).to_contain_text("Not uploaded")
    uploads.get_by_role("button", name="Dismiss").click()
    expect(uploads).to_have_count(0)

    # Delete, confirmed: gone from the grid, its bytes back in the quota.
    with api(server, token(page)) as client:
        before = client.get("/storage").json()["used_bytes"]
    card(page, "noise.png").get_by_role("button", name="Delete noise.png").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete", exact=True).click()
    expect(card(page, "noise.png")).to_have_count(0)
    with api(server, token(page)) as client:
        deadline = time.monotonic() + 10
        while client.get("/storage").json()["used_bytes"] >= before:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_a_photo_dropped_on_the_canvas_runs(page: Page, server: ServerProcess) -> None:
    """A new user's first media workflow: drop a photo on the canvas, connect it to Resize,
    run, see the small image; then run again with another photo chosen in the run dialog.
    (Still logged in from the test above: the module shares one tab.)"""
    graph = {"nodes": [], "edges": [], "viewport": {"x": 0, "y": 0, "zoom": 1}}
    with api(server, token(page)) as client:
        made = client.post("/workflows", json={"name": "Resize my photo", "graph_json": graph})
        assert made.status_code == 201, made.text
        wf = made.json()["id"]
    page.goto(f"/workflows/{wf}")
    photo = noise("JPEG", (320, 240), 2)
    page.locator(".react-flow__pane").wait_for()
    drop_files(page, ".react-flow__pane", [("Product Photo.jpg", "image/jpeg", photo)], 120, 120)
    expect(node(page, "Image input")).to_be_visible()
    drag_from_palette(page, "Resize image", 600, 160)
    connect(page, "Image input", "Resize image", "image")
    expect(page.locator(".react-flow__edge")).to_have_count(1)

    toolbar = page.get_by_role("toolbar", name="Editor")
    toolbar.get_by_role("button", name="Run", exact=True).click()
    dialog = page.get_by_role("dialog")
    picker = dialog.get_by_label("Input “product_photo” (image)")
    expect(picker.locator("option:checked")).to_contain_text("Product Photo.jpg")
    dialog.get_by_role("button", name="Start run").click()
    resized = node(page, "Resize image")
    expect(resized).to_have_attribute("data-status", "completed", timeout=60_000)
    expect(resized.locator("img")).to_be_visible()
    shot(page, "canvas-drop-run")

    with api(server, token(page)) as client:
        saved = client.get(f"/workflows/{wf}").json()["graph_json"]["nodes"]
        dropped = next(n for n in saved if n["type"] == "ImageInput")
        assert dropped["data"]["key"] == "product_photo"
        first_asset = dropped["data"]["asset"]
        runs = client.get(f"/workflows/{wf}/runs").json()
        first = wait_for_run(client, wf, runs[0]["id"])
        assert first["input"] == {"product_photo": first_asset}

    # Again, with another photo uploaded in the run dialog.
    toolbar.get_by_role("button", name="Run", exact=True).click()
    dialog.get_by_label("File for input product_photo").set_input_files(
        files=[{"name": "other.png", "mimeType": "image/png",
                "buffer": noise("PNG", (50, 40), 3)}]
    )  # fmt: skip
    expect(picker.locator("option:checked")).to_have_text("other.png")
    dialog.get_by_role("button", name="Start run").click()
    expect(dialog).to_be_hidden()
    with api(server, token(page)) as client:
        deadline = time.monotonic() + 30
        while True:
            runs = client.get(f"/workflows/{wf}/runs").json()
            if len(runs) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        newest = wait_for_run(client, wf, runs[0]["id"])
        assert newest["status"] == "completed", newest
        other = newest["input"]["product_photo"]
        assert other != first_asset
        assert client.get(f"/assets/{other}").json()["name"] == "other.png"


def test_a_pasted_image_becomes_an_input_node(page: Page, server: ServerProcess) -> None:
    """Ctrl+V of an image (a screenshot, say) on the canvas: uploaded, then an Image input
    node bound to it. (The editor of the test above is still open.)"""
    page.evaluate(
        """(b64) => {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const data = new DataTransfer();
            data.items.add(new File([bytes], "image.png", { type: "image/png" }));
            document.body.dispatchEvent(
                new ClipboardEvent("paste", { clipboardData: data, bubbles: true }),
            );
        }""",
        base64.b64encode(noise("PNG", (60, 40), 4)).decode(),
    )
    expect(node(page, "Image input")).to_have_count(2)
    page.keyboard.press("Control+s")
    expect(page.get_by_role("toolbar", name="Editor")).to_contain_text("All changes saved")
    wf = page.url.rsplit("/", 1)[-1]
    with api(server, token(page)) as client:
        saved = client.get(f"/workflows/{wf}").json()["graph_json"]["nodes"]
    keys = sorted(n["data"]["key"] for n in saved if n["type"] == "ImageInput")
    assert keys == ["image", "product_photo"]


def long_wav(seconds: int, seed: int) -> bytes:
    """A mono 16-bit WAV of quiet noise: 88,200 bytes a second, no two seeds alike."""
    samples = np.random.default_rng(seed).integers(-2000, 2000, seconds * 44100, dtype=np.int16)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(44100)
        out.writeframes(samples.tobytes())
    return buffer.getvalue()


def test_a_large_file_goes_up_resumably(page: Page, server: ServerProcess) -> None:
    """A file over 8 MiB goes up over tus, in pieces the server keeps as they come, and
    becomes an asset as a small one does (converted: WAV -> MP3)."""
    voice = long_wav(100, 5)
    assert len(voice) > 8 * 1024 * 1024
    sent: list[str] = []
    page.on("request", lambda r: sent.append(f"{r.method} {r.url}"))
    page.goto("/assets")
    page.get_by_label("Files to upload").set_input_files(
        files=[{"name": "voice-memo.wav", "mimeType": "audio/wav", "buffer": voice}]
    )
    expect(card(page, "voice-memo.wav")).to_contain_text("audio", timeout=120_000)
    assert any(s.startswith("POST ") and s.endswith("/api/v1/uploads/tus") for s in sent), sent
    assert any(s.startswith("PATCH ") and "/api/v1/uploads/tus/" in s for s in sent), sent
    with api(server, token(page)) as client:
        listed = client.get("/assets", params={"kind": "audio"}).json()
    memo = next(a for a in listed if a["name"] == "voice-memo.wav")
    assert memo["content_type"] == "audio/mpeg" and 99_000 <= memo["duration_ms"] <= 101_000
