"""The output cache and the estimate of runs that bring media (issue 33): a node fed by a
media input finds its earlier output by the file's content (sha256), whichever id named
the file; and a node priced per second of its input holds what the file's length costs
when the length is known before the run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_assets import _noise_png, upload
from tests.api.test_media_inputs import artifacts_of, resize_graph, run_to_end
from tests.conftest import User
from tests.media_files import audio_file
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"])


def _cached(run: dict[str, Any]) -> dict[str, bool]:
    return {nr["node_id"]: nr["cached"] for nr in run["node_runs"]}


async def test_the_cache_key_is_the_files_content_not_its_id(
    client: httpx.AsyncClient, owner: User
) -> None:
    asset = (await upload(client, owner, _noise_png(61), "cat.png")).json()
    workflow_id = await create_workflow(client, owner, resize_graph(key="photo"))
    first = await run_to_end(client, owner, workflow_id, {"input": {"photo": asset["id"]}})
    assert first["status"] == "completed", first
    assert _cached(first)["small"] is False

    # The artifact the first run's input node made: another id, the same content.
    photo_artifact = artifacts_of(first)["photo"]
    assert photo_artifact != asset["id"]
    second = await run_to_end(client, owner, workflow_id, {"input": {"photo": photo_artifact}})
    assert second["status"] == "completed", second
    assert _cached(second)["small"] is True
    assert artifacts_of(second)["small"] == artifacts_of(first)["small"]

    # Other content under a new id is not a hit.
    other = (await upload(client, owner, _noise_png(62), "dog.png")).json()
    third = await run_to_end(client, owner, workflow_id, {"input": {"photo": other["id"]}})
    assert third["status"] == "completed", third
    assert _cached(third)["small"] is False


def _volume_graph(**audio_input: Any) -> dict[str, Any]:
    return g(
        [
            n("voice", "AudioInput", **audio_input),
            n("louder", "AudioVolume", gain_db=3, max_seconds=300),
        ],
        [e("voice", "louder")],
    )


async def _estimate(
    client: httpx.AsyncClient, user: User, workflow_id: str, run_input: dict[str, Any]
) -> int:
    r = await client.post(
        f"/api/v1/workflows/{workflow_id}/estimate", json={"input": run_input}, headers=user.headers
    )
    assert r.status_code == 200, r.text
    parts = {node["node_id"]: node["credits"] for node in r.json()["nodes"]}
    assert sum(parts.values()) == r.json()["estimated_credits"]
    return int(r.json()["estimated_credits"])


async def test_a_node_priced_by_its_inputs_length_holds_the_files_length(
    client: httpx.AsyncClient, owner: User, other: User, tmp_path: Path
) -> None:
    wav = audio_file(tmp_path / "memo.wav", "wav", "pcm_s16le", seconds=2.5)
    asset = (await upload(client, owner, wav, "memo.wav")).json()
    seconds = math.ceil(asset["duration_ms"] / 1000)
    assert 3 <= seconds <= 4
    workflow_id = await create_workflow(client, owner, _volume_graph(key="voice"))
    bound = 1 + 300  # AudioVolume: 1 credit and 1 per second, max_seconds 300

    assert await _estimate(client, owner, workflow_id, {"voice": asset["id"]}) == 1 + seconds
    assert await _estimate(client, owner, workflow_id, {}) == bound
    theirs = (await upload(client, other, wav, "memo.wav")).json()
    assert await _estimate(client, owner, workflow_id, {"voice": theirs["id"]}) == bound

    before = await balance(client, owner)
    r = await execute(client, owner, workflow_id, {"input": {"voice": asset["id"]}})
    assert r.status_code == 202, r.text
    assert r.json()["estimated_credits"] == 1 + seconds
    run = await wait_for_run(client, owner, workflow_id, r.json()["run_id"], timeout=60)
    assert run["status"] == "completed", run
    assert 0 < run["credits_used"] <= 1 + seconds
    assert await balance(client, owner) == before - run["credits_used"]

    # The default asset is read as the run's input is.
    default = await create_workflow(client, owner, _volume_graph(asset=asset["id"]))
    assert await _estimate(client, owner, default, {}) == 1 + seconds
