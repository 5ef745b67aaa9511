"""The Dockerfile: its shape is checked everywhere; the image is built and started only where
a Docker engine answers (``docker info``), otherwise that test is skipped saying why. It is
never required by NODELOOM_REQUIRE_SERVICES: CI machines without Docker still pass."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def _stages() -> list[str]:
    return re.split(r"^FROM ", DOCKERFILE, flags=re.MULTILINE)[1:]


class TestShape:
    def test_multi_stage_with_the_package_built_in_the_first(self) -> None:
        stages = _stages()
        assert len(stages) >= 2
        assert " AS build" in stages[0] and "pip install" in stages[0]
        assert "COPY --from=build /opt/nodeloom /opt/nodeloom" in stages[-1]
        assert "pip install" not in stages[-1]  # no compilers or caches in the runtime image

    def test_runs_as_an_unprivileged_user_with_a_data_volume(self) -> None:
        final = _stages()[-1]
        users = re.findall(r"^USER (\S+)", final, flags=re.MULTILINE)
        assert users and users[-1] not in ("root", "0")
        assert 'VOLUME ["/data"]' in final and "NODELOOM_DATA_DIR=/data" in final
        assert "chown nodeloom:nodeloom /data" in final
        assert re.search(r'CMD \["nodeloom", "serve", "--host", "0.0.0.0"', final)
        assert "HEALTHCHECK" in final and "/healthz" in final

    def test_the_build_context_leaves_local_state_out(self) -> None:
        ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
        assert {".git", ".venv", "data", "tests"} <= set(ignored)


def _docker_problem() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return "no docker command on PATH"
    info = subprocess.run(
        [docker, "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if info.returncode != 0:
        lines = (info.stderr or info.stdout).strip().splitlines()
        return "no usable Docker engine: " + (lines[-1] if lines else f"exit {info.returncode}")
    return None


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    problem = _docker_problem()
    if problem is not None:
        pytest.skip(f"{problem} (building the image needs one; this is not a required service)")
    tag = f"nodeloom-test:{uuid.uuid4().hex[:12]}"
    build = subprocess.run(
        ["docker", "build", "-t", tag, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@pytest.mark.slow
@pytest.mark.timeout(1900)
def test_image_serves_as_an_unprivileged_user(image: str) -> None:
    port = free_port()
    name = f"nodeloom-test-{uuid.uuid4().hex[:12]}"
    started = subprocess.run(
        ["docker", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000", image],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, subprocess.run(
                ["docker", "logs", name], capture_output=True, text=True, check=False
            ).stderr
            time.sleep(0.5)
        uid = subprocess.run(
            ["docker", "exec", name, "id", "-u"], capture_output=True, text=True, check=False
        )
        assert uid.stdout.strip() not in ("", "0")
        listing = subprocess.run(
            ["docker", "exec", name, "ls", "/data"], capture_output=True, text=True, check=False
        )
        assert "nodeloom.db" in listing.stdout.split()
        version = subprocess.run(
            ["docker", "exec", name, "nodeloom", "--version"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert version.stdout.startswith("nodeloom ")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
