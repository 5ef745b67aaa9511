"""HttpRequest answering media in a real run (issue 33): the output param types the node,
the graph is checked with that kind, and the run's artifact is the file read from its
content (a PNG served as text/plain) with its kind. The address guard is the node's own: the
test server on 127.0.0.1 is allow-listed."""

from __future__ import annotations

import io
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.api import test_media_by_reference
from tests.api.test_media_inputs import artifacts_of, run_to_end
from tests.conftest import User
from tests.fakes import FakeServer
from tests.runs_helpers import assert_graph_refused, create_workflow, e, g, n

site = test_media_by_reference.site  # the files: /photo.png (a PNG sent as text), /page.html


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"http_allowlist": ["127.0.0.1/32"]}


def _graph(url: str, output: str = "image") -> dict[str, Any]:
    return g(
        [
            n("get", "HttpRequest", url=url, output=output),
            n("small", "ImageResize", width=16, height=12),
        ],
        [e("get", "small")],
    )


async def test_an_image_answer_feeds_an_image_node(
    client: httpx.AsyncClient, owner: User, site: FakeServer
) -> None:
    workflow_id = await create_workflow(client, owner, _graph(f"{site.url}/photo.png"))
    run = await run_to_end(client, owner, workflow_id, {})
    assert run["status"] == "completed", run
    got = artifacts_of(run)["get"]
    meta = (await client.get(f"/api/v1/artifacts/{got}/metadata", headers=owner.headers)).json()
    assert meta["content_type"] == "image/png" and meta["kind"] == "image"
    assert (meta["width"], meta["height"]) == (18, 18)
    body = (await client.get(f"/api/v1/artifacts/{got}", headers=owner.headers)).content
    with Image.open(io.BytesIO(body)) as image:
        assert image.format == "PNG" and not image.getexif()
    small = artifacts_of(run)["small"]
    meta = (await client.get(f"/api/v1/artifacts/{small}/metadata", headers=owner.headers)).json()
    assert (meta["width"], meta["height"]) == (16, 12)


async def test_a_text_answer_fails_the_node_with_kind_mismatch(
    client: httpx.AsyncClient, owner: User, site: FakeServer
) -> None:
    workflow_id = await create_workflow(client, owner, _graph(f"{site.url}/page.html"))
    run = await run_to_end(client, owner, workflow_id, {})
    assert run["status"] == "failed", run
    got = next(nr for nr in run["node_runs"] if nr["node_id"] == "get")
    assert got["error"]["code"] == "kind_mismatch", got


async def test_the_graph_is_checked_with_the_kind_the_param_names(
    client: httpx.AsyncClient, owner: User, site: FakeServer
) -> None:
    edge = "/graph_json/edges/0/target"
    for output in ("body", "json", "audio", "video"):
        said = "text" if output in ("body", "json") else output
        graph = _graph(f"{site.url}/photo.png", output=output)
        await assert_graph_refused(client, owner, graph, edge, f"outputs {said}")
