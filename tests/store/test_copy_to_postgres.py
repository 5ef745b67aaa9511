"""Moving an embedded installation to PostgreSQL with ``nodeloom db copy-to``: what the API
showed on SQLite, it shows the same on PostgreSQL afterwards (ids, runs, artifacts, keys,
balance and ledger), and the copy refuses a target that is not empty."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from nodeloom.api.app import create_app
from nodeloom.settings import Settings
from tests import launcher
from tests.conftest import TEST_SECRET, _admin, _pg_url, make_user, text_graph
from tests.runs_helpers import create_workflow, execute, wait_for_run
from tests.services import require_postgres


def _copy(data_dir: Path, target: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NODELOOM_DATA_DIR": str(data_dir), "NODELOOM_SECRET_KEY": TEST_SECRET}
    return launcher.run(["db", "copy-to", target], env)


async def test_an_embedded_installation_moves_to_postgres(
    settings: Settings, client: httpx.AsyncClient, app: object, tmp_path: Path
) -> None:
    require_postgres()
    owner = await make_user(client, "mover@example.com")
    wf = await create_workflow(client, owner, text_graph("moved {{ text }}"))
    r = await execute(client, owner, wf, {"input": {"text": "along"}})
    run = await wait_for_run(client, owner, wf, r.json()["run_id"])
    r = await client.post(
        "/api/v1/apps",
        json={"workflow_id": wf, "title": "Moved", "outputs": [{"node_id": "tpl"}]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    published = r.json()
    before = {
        "workflows": (await client.get("/api/v1/workflows", headers=owner.headers)).json(),
        "run": (
            await client.get(f"/api/v1/workflows/{wf}/runs/{run['id']}", headers=owner.headers)
        ).json(),
        "me": (await client.get("/api/v1/me", headers=owner.jwt_headers)).json(),
        "ledger": (await client.get("/api/v1/me/ledger", headers=owner.jwt_headers)).json(),
    }
    name = f"nl_copy_{uuid.uuid4().hex[:12]}"
    await _admin(f'CREATE DATABASE "{name}"')
    target = _pg_url(name)
    try:
        done = await asyncio.to_thread(_copy, settings.data_dir, target)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "node_runs: 2 rows" in done.stdout
        again = await asyncio.to_thread(_copy, settings.data_dir, target)
        assert again.returncode == 1 and "already has accounts" in again.stdout

        moved = create_app(settings.model_copy(update={"database_url": target}))
        async with moved.router.lifespan_context(moved):  # type: ignore[attr-defined]
            transport = httpx.ASGITransport(app=moved)  # type: ignore[arg-type]
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as pg:
                assert (await pg.get("/api/v1/workflows", headers=owner.headers)).json() == before[
                    "workflows"
                ]
                r = await pg.get(f"/api/v1/workflows/{wf}/runs/{run['id']}", headers=owner.headers)
                assert r.json() == before["run"]
                assert (await pg.get("/api/v1/me", headers=owner.jwt_headers)).json() == before[
                    "me"
                ]
                assert (
                    await pg.get("/api/v1/me/ledger", headers=owner.jwt_headers)
                ).json() == before["ledger"]
                r = await pg.get(f"/api/v1/apps/{published['id']}", headers=owner.headers)
                assert r.status_code == 200 and r.json()["slug"] == published["slug"]
                tpl = next(n for n in run["node_runs"] if n["node_id"] == "tpl")
                r = await pg.get(f"/api/v1/artifacts/{tpl['artifact_id']}", headers=owner.headers)
                assert r.text == "moved along"
                # The ledger's ids continue after the copied rows on PostgreSQL.
                r = await execute(pg, owner, wf, {"input": {"text": "again"}})
                assert (await wait_for_run(pg, owner, wf, r.json()["run_id"]))[
                    "status"
                ] == "completed"
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 10_000}
