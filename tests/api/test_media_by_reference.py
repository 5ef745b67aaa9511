"""Run inputs that bring their media by URL or data: URI (issue 33): fetched through the
HttpRequest node's address guard (an allow-listed test server on 127.0.0.1 stands for the
public host; 127.0.0.2 stays refused), received and ingested exactly as an upload, and the
run's input then holds the new asset's id. Every refusal is problem+json before any run
exists, on both databases."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import httpx
import pytest

from tests.api.test_assets import _noise_png
from tests.api.test_auth import assert_problem
from tests.api.test_media_inputs import artifacts_of, resize_graph, run_to_end
from tests.conftest import User
from tests.fakes import FakeServer, serve
from tests.runs_helpers import create_workflow, execute, g, n, wait_for_run

# Every test on both databases (the conftest's `backend` fixture, parametrized here).
pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"])

PHOTO = _noise_png(41)
BIG = 3 * 1024 * 1024  # over the file size these tests give the free plan


class _Files(BaseHTTPRequestHandler):
    """/photo.png (served as text/plain: the content decides), /big (a gzip bomb: a small
    body that inflates past the limit), /page.html, /missing (404), /moved (a redirect to
    a refused address)."""

    fetched: ClassVar[list[str]] = []  # the paths asked for, in order

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        _Files.fetched.append(path)
        if path == "/photo.png":
            self._answer(200, PHOTO, {"Content-Type": "text/plain"})
        elif path == "/big":
            body = gzip.compress(b"\0" * BIG)
            self._answer(200, body, {"Content-Type": "image/png", "Content-Encoding": "gzip"})
        elif path == "/page.html":
            self._answer(200, b"<html><body>hello</body></html>", {"Content-Type": "text/html"})
        elif path == "/moved":
            self._answer(302, b"", {"Location": f"http://127.0.0.2:{self.server.server_port}/x"})
        else:
            self._answer(404, b"not here", {"Content-Type": "text/plain"})

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[FakeServer]:
    _Files.fetched.clear()
    server = serve(_Files)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {
        "http_allowlist": ["127.0.0.1/32"],
        "upload_limits": {"free": {"file_bytes": 2 * 1024 * 1024}},
    }


async def _free_user(client: httpx.AsyncClient, owner: User, other: User) -> User:
    """``other`` is on the free plan (the owner's is the largest)."""
    me = await client.get("/api/v1/me", headers=other.headers)
    assert me.json()["plan"] == "free", me.text
    return other


async def test_a_url_and_a_data_uri_become_assets_and_feed_the_run(
    client: httpx.AsyncClient, owner: User, site: FakeServer
) -> None:
    workflow_id = await create_workflow(client, owner, resize_graph(key="photo"))
    run = await run_to_end(
        client, owner, workflow_id, {"input": {"photo": f"{site.url}/photo.png?v=1"}}
    )
    assert run["status"] == "completed", run
    asset_id = run["input"]["photo"]
    asset = (await client.get(f"/api/v1/assets/{asset_id}", headers=owner.headers)).json()
    assert asset["name"] == "photo.png"
    assert asset["kind"] == "image" and (asset["width"], asset["height"]) == (18, 18)
    meta = await client.get(
        f"/api/v1/artifacts/{artifacts_of(run)['photo']}/metadata", headers=owner.headers
    )
    assert meta.json()["sha256"] == asset["sha256"]

    # The same picture as a data: URI is the same asset (deduplicated by content).
    uri = "data:image/png;base64," + base64.b64encode(PHOTO).decode()
    again = await run_to_end(client, owner, workflow_id, {"input": {"photo": uri}})
    assert again["status"] == "completed", again
    assert again["input"]["photo"] == asset_id


async def test_a_url_given_to_a_text_input_stays_text(
    client: httpx.AsyncClient, owner: User, site: FakeServer
) -> None:
    """Only keys a media input node reads are fetched: a URL is a fine text."""
    graph = g([n("t", "TextInput", key="link"), n("p", "ImageInput", key="photo")], [])
    workflow_id = await create_workflow(client, owner, graph)
    photo = f"{site.url}/photo.png"
    run = await run_to_end(
        client, owner, workflow_id, {"input": {"link": f"{site.url}/page.html", "photo": photo}}
    )
    assert run["status"] == "completed", run
    assert run["input"]["link"] == f"{site.url}/page.html"
    assert run["input"]["photo"] != photo
    assert _Files.fetched == ["/photo.png"]


async def test_refusals_are_problems_before_any_run(
    client: httpx.AsyncClient, owner: User, other: User, site: FakeServer
) -> None:
    user = await _free_user(client, owner, other)
    workflow_id = await create_workflow(client, user, resize_graph(key="photo"))

    async def refused(value: str, status: int, code: str) -> dict[str, Any]:
        r = await execute(client, user, workflow_id, {"input": {"photo": value}})
        assert_problem(r, status, code)
        return dict(r.json())

    body = await refused("https://[::1/x.png", 400, "invalid_request")
    assert body["errors"][0]["pointer"] == "/input/photo"
    body = await refused("http://example.com/cat.png", 400, "invalid_request")
    assert "https" in body["detail"]
    await refused("data:image/png;base64,***", 400, "invalid_request")
    await refused("data:image/png;base64", 400, "invalid_request")

    # A private address, directly or by a redirect: refused by the address guard.
    body = await refused(f"https://127.0.0.2:{site.port}/photo.png", 422, "media_fetch_failed")
    assert body["reason"] == "address_refused"
    await refused("https://10.1.2.3/photo.png", 422, "media_fetch_failed")
    body = await refused(f"{site.url}/moved", 422, "media_fetch_failed")
    assert "127.0.0.2" in body["detail"] and body["reason"] == "address_refused"
    body = await refused(f"{site.url}/missing", 422, "media_fetch_failed")
    assert body["upstream_status"] == 404

    # Too large: a body that inflates past the plan's file size, a data URI over it.
    body = await refused(f"{site.url}/big", 413, "payload_too_large")
    assert body["limit"] == 2 * 1024 * 1024
    huge = "data:image/png;base64," + "A" * (3 * 1024 * 1024)
    r = await execute(client, user, workflow_id, {"input": {"photo": huge}})
    assert r.status_code == 413, r.text  # the execute body's own 1 MB cap answers first

    # Not media: what the content is decides, not the Content-Type.
    await refused(f"{site.url}/page.html", 415, "unsupported_media")
    await refused("data:text/plain,hello%20there", 415, "unsupported_media")

    runs = await client.get(f"/api/v1/workflows/{workflow_id}/runs", headers=user.headers)
    assert runs.json() == []
    assets = await client.get("/api/v1/assets", headers=user.headers)
    assert assets.json() == []


async def test_multipart_input_and_unknown_workflows(
    client: httpx.AsyncClient, owner: User, other: User, site: FakeServer
) -> None:
    """A URL in a multipart execute's JSON `input` part is fetched too; an unknown (or
    another account's) workflow is 404 without anything fetched."""
    workflow_id = await create_workflow(client, owner, resize_graph(key="photo"))
    form = {"input": (None, json.dumps({"photo": f"{site.url}/photo.png"}).encode())}
    r = await client.post(
        f"/api/v1/workflows/{workflow_id}/execute", files=form, headers=owner.headers
    )
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, workflow_id, r.json()["run_id"], timeout=60)
    assert run["status"] == "completed", run
    assert not run["input"]["photo"].startswith("http")

    fetched = len(_Files.fetched)
    assert fetched == 1
    for user in (owner, other):
        missing = "00000000-0000-4000-8000-000000000000" if user is owner else workflow_id
        r = await execute(client, user, missing, {"input": {"photo": f"{site.url}/photo.png"}})
        assert_problem(r, 404, "not_found")
    assert len(_Files.fetched) == fetched
