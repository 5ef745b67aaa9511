"""A package's node used in a real run (in the sandbox), and a workflow whose package is gone."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from nodeloom.api.app import create_app
from nodeloom.settings import Settings
from tests.conftest import User
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run

# Installs node packages into the environment every process shares, which every other
# test's app would discover meanwhile: run alone, after the parallel part (ADR 0051).
pytestmark = pytest.mark.serial

GRAPH = g(
    [
        n(
            "bg",
            "GradientBackground",
            width=96,
            height=48,
            color_from="#000000",
            color_to="#000000",
        ),
        n("mark", "watermark.Watermark", text="ACME", corner="top-left", opacity=1.0),
    ],
    [e("bg", "mark", "image")],
)


async def test_a_package_node_runs_in_a_workflow(
    watermark_installed: Path, client: httpx.AsyncClient, owner: User
) -> None:
    wf = await create_workflow(client, owner, GRAPH)
    r = await execute(client, owner, wf)
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, wf, r.json()["run_id"], timeout=60)
    assert run["status"] == "completed", run
    art = {nr["node_id"]: nr["artifact_id"] for nr in run["node_runs"]}["mark"]
    png = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
    assert png.headers["content-type"] == "image/png"
    image = Image.open(io.BytesIO(png.content)).convert("L")
    assert image.size == (96, 48)
    assert image.crop((0, 0, 40, 16)).getextrema()[1] > 200  # the mark, white on black
    assert image.crop((60, 30, 96, 48)).getextrema() == (0, 0)


async def test_a_workflow_whose_package_is_gone_loads_but_does_not_run(
    watermark_installed: Path, settings: Settings, client: httpx.AsyncClient, owner: User
) -> None:
    wf = await create_workflow(client, owner, GRAPH)
    # The same database, served by a server that does not load the package.
    without = create_app(
        settings.model_copy(update={"disabled_node_packages": ["nodeloom-watermark"]})
    )
    async with without.router.lifespan_context(without), _client(without) as other:
        r = await other.get(f"/api/v1/workflows/{wf}", headers=owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        (mark,) = [node for node in body["graph_json"]["nodes"] if node["id"] == "mark"]
        assert mark["type"] == "watermark.Watermark"
        assert mark["data"] == {"text": "ACME", "corner": "top-left", "opacity": 1.0}
        (warning,) = body["warnings"]
        assert warning["pointer"] == "/graph_json/nodes/1/type"
        assert "node package of namespace 'watermark' is not installed" in warning["message"]

        # Still editable: saved as it is, the node's type and params untouched, with the
        # same warning.
        r = await other.patch(
            f"/api/v1/workflows/{wf}",
            json={"name": "renamed", "graph_json": body["graph_json"]},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        assert r.json()["graph_json"] == body["graph_json"]
        assert r.json()["warnings"] == [warning]

        r = await execute(other, owner, wf)
        assert r.status_code == 400, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert "watermark.Watermark" in str(problem)
        assert "not installed or not loaded" in str(problem)

    # Back with the package, the same workflow runs with its params intact.
    r = await execute(client, owner, wf)
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, wf, r.json()["run_id"], timeout=60)
    assert run["status"] == "completed", run


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")
