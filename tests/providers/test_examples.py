"""The Replicate and fal examples (examples/*.json) pushed to a real server with the
placeholder credential ids replaced by real credentials, run end to end against the fakes of
both APIs on 127.0.0.1, and each output decoded."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.examples.test_examples import EXAMPLES, decode
from tests.providers.fakes import FAL_KEY, REPLICATE_TOKEN, FakeFal, FakeReplicate
from tests.providers.test_resume import _login
from tests.server import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[httpx.Client, FakeReplicate, FakeFal]]:
    fakes = tmp_path_factory.mktemp("fakes")
    replicate, fal = FakeReplicate(fakes), FakeFal(fakes)
    server = ServerProcess(
        tmp_path_factory.mktemp("server"),
        env={
            "NODELOOM_HTTP_ALLOWLIST": json.dumps(["127.0.0.1/32"]),
            "NODELOOM_REPLICATE_API_URL": replicate.url + "/v1",
            "NODELOOM_FAL_QUEUE_URL": fal.url,
            "NODELOOM_LOG_LEVEL": "WARNING",
        },
    )
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as http:
            _login(http)
            yield http, replicate, fal
    finally:
        server.stop()
        replicate.stop()
        fal.stop()


def _run(http: httpx.Client, name: str, replace: dict[str, str]) -> dict[str, dict[str, Any]]:
    text = (EXAMPLES / name).read_text(encoding="utf-8")
    for placeholder, value in replace.items():
        text = text.replace(placeholder, value)
    document = json.loads(text)
    r = http.post("/api/v1/workflows", json=document)
    assert r.status_code == 201, r.text
    wf = r.json()["id"]
    run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": document["input"]}).json()[
        "run_id"
    ]
    for _ in range(600):
        run = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
        if run["status"] != "running":
            break
        time.sleep(0.1)
    assert run["status"] == "completed", run
    decoded = {}
    for node in run["node_runs"]:
        r = http.get(f"/api/v1/artifacts/{node['artifact_id']}")
        assert r.status_code == 200
        ctype = r.headers["content-type"].split(";")[0]
        decoded[node["node_id"]] = {"type": ctype, **decode(ctype, r.content)}
    return decoded


def _credential(http: httpx.Client, kind: str, fields: dict[str, str]) -> str:
    r = http.post("/api/v1/credentials", json={"name": kind, "kind": kind, "fields": fields})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_replicate_product_video(world: tuple[httpx.Client, FakeReplicate, FakeFal]) -> None:
    http, replicate, _ = world
    cred = _credential(http, "replicate", {"api_token": REPLICATE_TOKEN})
    replicate.script.by_model = {"flux": "image", "kling": "video"}
    out = _run(http, "replicate-product-video.json", {"REPLICATE_CREDENTIAL_ID": cred})
    assert out["shot"]["type"] == "image/png"
    assert out["clip"]["type"] == "video/mp4" and out["clip"]["video"] == "h264"
    clip = next(j for j in replicate.jobs.values() if "kling" in j.model)
    assert clip.input["start_image"].startswith("data:image/png;base64,")
    assert clip.input["duration"] == 5 and clip.input["mode"] == "standard"


def test_fal_cover_music(world: tuple[httpx.Client, FakeReplicate, FakeFal]) -> None:
    http, _, fal = world
    cred = _credential(http, "fal", {"api_key": FAL_KEY})
    fal.script.by_model = {"flux": "jpeg", "stable-audio": "wav"}
    out = _run(http, "fal-cover-music.json", {"FAL_CREDENTIAL_ID": cred})
    assert out["cover"]["type"] == "image/png"
    assert out["music"]["type"] == "audio/mpeg" and out["music"]["audio"] == "mp3"
    assert out["video"]["type"] == "video/mp4" and out["video"]["video"] == "h264"
    music = next(j for j in fal.jobs.values() if "stable-audio" in j.model)
    assert music.input == {"prompt": "lofi night drive, neon city, rain", "seconds_total": 10}
