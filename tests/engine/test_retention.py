"""Retention removes finished runs past their age with everything that hangs off them, and
files nothing references, but never a running run, a recent one, a referenced file, or a
row of the credit ledger. On both databases.

A pass is made as of a moment the test names (``prune(now=...)``): the runs that ended before
a boundary are as old as the retention, those after it younger, however long the machine took
between the two."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.db.models import utcnow
from nodeloom.engine.retention import Retention
from tests.conftest import User, text_graph
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run

RETENTION_SECONDS = 3600.0


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"retention_days": RETENTION_SECONDS / 86400, "retention_check_seconds": 3600}


def _age(path: Path, hours: float) -> None:
    then = time.time() - hours * 3600
    os.utime(path, (then, then))


async def _ledger_rows(app: FastAPI) -> int:
    query = sa.text("select count(*) from credit_ledger")
    return int(await app.state.ctx.db.read(lambda c: c.execute(query).scalar()))


def aged_past(boundary: datetime) -> datetime:
    """The moment at which what ended before ``boundary`` is past its retention."""
    return boundary + timedelta(seconds=RETENTION_SECONDS)


def large(word: str) -> str:
    """A text over the size kept in an artifact's row: its artifact is a file."""
    return word * 70_000


async def test_old_runs_and_unreferenced_files_go_the_rest_stays(
    app: FastAPI, client: httpx.AsyncClient, owner: User
) -> None:
    ctx = app.state.ctx
    wf = await create_workflow(client, owner, text_graph("old {{ text }}"))
    old = []
    for word in ("a", "b"):
        r = await execute(client, owner, wf, {"input": {"text": large(word)}, "cache": False})
        old.append(await wait_for_run(client, owner, wf, r.json()["run_id"]))
    boundary = utcnow()
    slow = await create_workflow(
        client,
        owner,
        g([n("in", "TextInput", text="x"), n("d", "Delay", seconds=60)], [e("in", "d")]),
    )
    running = (await execute(client, owner, slow)).json()["run_id"]
    r = await execute(client, owner, wf, {"input": {"text": large("new")}, "cache": False})
    recent = await wait_for_run(client, owner, wf, r.json()["run_id"])

    async def file_of(run: dict[str, Any]) -> Path:
        artifact = next(x for x in run["node_runs"] if x["node_id"] == "tpl")["artifact_id"]
        r = await client.get(f"/api/v1/artifacts/{artifact}/metadata", headers=owner.headers)
        return Path(ctx.store.path_for(r.json()["sha256"]))

    old_files = [await file_of(run) for run in old]
    kept_file = await file_of(recent)
    orphan = ctx.store.root / "ff" / "ff" / ("f" * 64)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left by a crash between the file and its row")
    for path in (*old_files, kept_file, orphan):
        _age(path, 2)
    ledger, credits = await _ledger_rows(app), await balance(client, owner)

    report = await Retention(ctx.settings, ctx.db, ctx.store).prune(now=aged_past(boundary))

    assert report.runs == 2
    assert report.files == 3  # the two old runs' outputs (aged above) and the orphan
    for run in old:
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{run['id']}", headers=owner.headers)
        assert r.status_code == 404
        tpl = next(x for x in run["node_runs"] if x["node_id"] == "tpl")
        r = await client.get(f"/api/v1/artifacts/{tpl['artifact_id']}", headers=owner.headers)
        assert r.status_code == 404
    assert not any(p.exists() for p in (*old_files, orphan))
    assert kept_file.exists()  # old on disk, but a kept run references it
    r = await client.get(f"/api/v1/workflows/{wf}/runs/{recent['id']}", headers=owner.headers)
    assert r.status_code == 200
    tpl = next(x for x in recent["node_runs"] if x["node_id"] == "tpl")
    r = await client.get(f"/api/v1/artifacts/{tpl['artifact_id']}", headers=owner.headers)
    assert r.text == "old " + large("new")
    r = await client.get(f"/api/v1/workflows/{slow}/runs/{running}", headers=owner.headers)
    assert r.status_code == 200 and r.json()["status"] == "running"
    assert await _ledger_rows(app) == ledger
    assert await balance(client, owner) == credits
    listed = (await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)).json()
    assert [x["id"] for x in listed] == [recent["id"]]
    r = await client.post(f"/api/v1/workflows/{slow}/runs/{running}/cancel", headers=owner.headers)
    assert r.status_code == 202, r.text  # so the app's shutdown does not wait for the Delay


async def test_an_artifact_a_kept_run_reuses_stays(
    app: FastAPI, client: httpx.AsyncClient, owner: User
) -> None:
    ctx = app.state.ctx
    wf = await create_workflow(client, owner, text_graph("shared {{ text }}"))
    r = await execute(client, owner, wf, {"input": {"text": "x"}})
    first = await wait_for_run(client, owner, wf, r.json()["run_id"])
    boundary = utcnow()
    r = await execute(client, owner, wf, {"input": {"text": "x"}})  # a cache hit
    second = await wait_for_run(client, owner, wf, r.json()["run_id"])
    tpl = next(x for x in second["node_runs"] if x["node_id"] == "tpl")
    assert tpl["cached"]

    report = await Retention(ctx.settings, ctx.db, ctx.store).prune(now=aged_past(boundary))

    assert report.runs == 1 and report.artifacts == 0
    r = await client.get(f"/api/v1/artifacts/{tpl['artifact_id']}", headers=owner.headers)
    assert r.status_code == 200 and r.text == "shared x"
    gone = await client.get(f"/api/v1/workflows/{wf}/runs/{first['id']}", headers=owner.headers)
    assert gone.status_code == 404
