"""ImageInput / AudioInput / VideoInput over HTTP: a run's input names an asset or an earlier
artifact of the account (or the node's default asset), the node's artifact is that very file
(same sha256), nodes downstream read it; another account's id fails like an unknown one."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.api.test_assets import _noise_png, upload
from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.media_files import SVG, audio_file
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run


def resize_graph(**image_input: Any) -> dict[str, Any]:
    return g(
        [n("photo", "ImageInput", **image_input), n("small", "ImageResize", width=8, height=6)],
        [e("photo", "small")],
    )


async def run_to_end(
    client: httpx.AsyncClient, user: User, workflow_id: str, body: Any
) -> dict[str, Any]:
    r = await execute(client, user, workflow_id, body)
    assert r.status_code == 202, r.text
    return await wait_for_run(client, user, workflow_id, r.json()["run_id"], timeout=60)


def artifacts_of(run: dict[str, Any]) -> dict[str, str]:
    return {nr["node_id"]: nr["artifact_id"] for nr in run["node_runs"]}


class TestImageInput:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_asset_id_feeds_the_graph(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        asset = (await upload(client, owner, _noise_png(7), "cat.png")).json()
        workflow_id = await create_workflow(client, owner, resize_graph(key="photo"))
        run = await run_to_end(client, owner, workflow_id, {"input": {"photo": asset["id"]}})
        assert run["status"] == "completed", run
        ids = artifacts_of(run)
        meta = await client.get(f"/api/v1/artifacts/{ids['photo']}/metadata", headers=owner.headers)
        assert meta.json()["sha256"] == asset["sha256"]
        assert (meta.json()["width"], meta.json()["height"]) == (18, 18)
        small = await client.get(f"/api/v1/artifacts/{ids['small']}", headers=owner.headers)
        with Image.open(io.BytesIO(small.content)) as image:
            assert image.size == (8, 6)

        # An artifact id of an earlier run of the account works as well.
        again = await run_to_end(client, owner, workflow_id, {"input": {"photo": ids["small"]}})
        assert again["status"] == "completed", again

        # Another account: its asset id is as unknown as a made-up one.
        theirs = (await upload(client, other, _noise_png(8), "dog.png")).json()
        for reference in (theirs["id"], "00000000-0000-4000-8000-000000000000"):
            failed = await run_to_end(client, owner, workflow_id, {"input": {"photo": reference}})
            assert failed["status"] == "failed"
            photo = next(nr for nr in failed["node_runs"] if nr["node_id"] == "photo")
            assert photo["error"]["code"] == "not_found"
            assert photo["error"]["message"] == (
                f"no asset or artifact {reference!r} in this account"
            )

    async def test_default_asset_and_kind_mismatch(
        self, client: httpx.AsyncClient, owner: User, tmp_path: Path
    ) -> None:
        image = (await upload(client, owner, _noise_png(3), "cat.png")).json()
        workflow_id = await create_workflow(
            client, owner, resize_graph(key="photo", asset=image["id"])
        )
        run = await run_to_end(client, owner, workflow_id, None)
        assert run["status"] == "completed", run

        sound = (
            await upload(client, owner, audio_file(tmp_path / "a.wav", "wav", "pcm_s16le"), "a")
        ).json()
        failed = await run_to_end(client, owner, workflow_id, {"input": {"photo": sound["id"]}})
        photo = next(nr for nr in failed["node_runs"] if nr["node_id"] == "photo")
        assert photo["error"]["code"] == "kind_mismatch"

    async def test_audio_input_keeps_the_length(
        self, client: httpx.AsyncClient, owner: User, tmp_path: Path
    ) -> None:
        sound = (
            await upload(client, owner, audio_file(tmp_path / "a.flac", "flac", "flac"), "a")
        ).json()
        workflow_id = await create_workflow(client, owner, g([n("a", "AudioInput", key="a")], []))
        run = await run_to_end(client, owner, workflow_id, {"input": {"a": sound["id"]}})
        assert run["status"] == "completed", run
        art = artifacts_of(run)["a"]
        meta = (await client.get(f"/api/v1/artifacts/{art}/metadata", headers=owner.headers)).json()
        assert meta["content_type"] == "audio/mpeg" and meta["sha256"] == sound["sha256"]
        assert meta["duration_ms"] == sound["duration_ms"]

    async def test_a_node_with_neither_key_nor_asset_is_refused_at_save(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "x", "graph_json": g([n("p", "ImageInput")], [])},
            headers=owner.headers,
        )
        assert r.status_code == 400 and r.json()["code"] == "invalid_graph"


class TestMultipartExecute:
    async def test_one_call_brings_its_file(self, client: httpx.AsyncClient, owner: User) -> None:
        workflow_id = await create_workflow(client, owner, resize_graph(key="photo"))
        png = _noise_png(21)
        r = await client.post(
            f"/api/v1/workflows/{workflow_id}/execute",
            data={"input": json.dumps({"note": "from a form"})},
            files={"photo": ("cat.png", png, "image/png")},
            headers=owner.headers,
            timeout=60,
        )
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, workflow_id, r.json()["run_id"], timeout=60)
        assert run["status"] == "completed", run
        assets = (await client.get("/api/v1/assets", headers=owner.headers)).json()
        assert [a["name"] for a in assets] == ["cat.png"]
        assert run["input"] == {"note": "from a form", "photo": assets[0]["id"]}

    async def test_input_part_must_be_a_json_object(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        workflow_id = await create_workflow(client, owner, resize_graph(key="photo"))
        r = await client.post(
            f"/api/v1/workflows/{workflow_id}/execute",
            data={"input": "[1, 2"},
            files={"photo": ("cat.png", _noise_png(2), "image/png")},
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_request")
        r = await client.post(
            f"/api/v1/workflows/{workflow_id}/execute",
            files={"photo": ("logo.svg", SVG, "image/svg+xml")},
            headers=owner.headers,
        )
        assert_problem(r, 415, "unsupported_media")


async def test_openapi_documents_the_file_bodies(client: httpx.AsyncClient) -> None:
    """Schemathesis, the generated clients and the API docs read the bodies from the
    document: uploads take multipart or raw bytes, execute takes JSON or multipart."""
    doc = (await client.get("/api/v1/openapi.json")).json()
    upload_body = doc["paths"]["/api/v1/uploads"]["post"]["requestBody"]["content"]
    assert upload_body["multipart/form-data"]["schema"]["properties"]["file"] == {
        "type": "string",
        "format": "binary",
    }
    assert upload_body["application/octet-stream"]["schema"]["format"] == "binary"
    execute_body = doc["paths"]["/api/v1/workflows/{workflow_id}/execute"]["post"]["requestBody"]
    assert execute_body["required"] is False
    assert set(execute_body["content"]) == {"application/json", "multipart/form-data"}
    form = execute_body["content"]["multipart/form-data"]["schema"]
    assert set(form["properties"]) == {"input", "cache"}
    assert form["additionalProperties"]["format"] == "binary"
