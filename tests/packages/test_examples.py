"""The example packages, installed with pip: their own tests pass, and their nodes run in a
workflow on a real server (the sandbox imports them)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.conftest import User
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run

# Installs node packages into the environment every process shares, which every other
# test's app would discover meanwhile: run alone, after the parallel part (ADR 0051).
pytestmark = pytest.mark.serial


@pytest.mark.parametrize("example", ["watermark_installed", "qrcode_installed"])
def test_an_example_passes_its_own_tests(example: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(example)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=path,
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"passed" in result.stdout


async def test_the_qrcode_wrapper_runs_in_a_workflow(
    qrcode_installed: Path, client: httpx.AsyncClient, owner: User
) -> None:
    r = await client.get("/api/v1/node-types", headers=owner.headers)
    (qr,) = [t for t in r.json() if t["type"] == "qr.QRCode"]
    assert qr["package"]["name"] == "nodeloom-qrcode" and qr["available"]
    assert set(qr["params_schema"]["properties"]) == {"box_size", "border", "error_correction"}

    graph = g(
        [n("in", "TextInput"), n("qr", "qr.QRCode", box_size=3, border=1)],
        [e("in", "qr")],
    )
    wf = await create_workflow(client, owner, graph)
    r = await execute(client, owner, wf, {"input": {"text": "https://example.com/t/7"}})
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, wf, r.json()["run_id"], timeout=60)
    assert run["status"] == "completed", run
    art = {nr["node_id"]: nr["artifact_id"] for nr in run["node_runs"]}["qr"]
    png = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
    image = Image.open(io.BytesIO(png.content))
    assert image.width == image.height and (image.width // 3 - 2 - 17) % 4 == 0
    assert image.getpixel((0, 0)) == 255 and image.getpixel((3, 3)) == 0
