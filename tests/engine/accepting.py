"""The engine reached without HTTP: the app's runtime, started by its lifespan (a driver per
run on SQLite, queue workers on PostgreSQL), runs accepted by its ``Acceptor`` and read back
from the database. For engine tests whose subject is what happens after acceptance: item
states, charges, links between runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.api.state import AppContext
from nodeloom.db.engine import Database
from nodeloom.db.models import CreditEntry, NodeRun, Run
from nodeloom.engine.run_request import RunRequest
from nodeloom.store import Record, accounts, workflows
from nodeloom.store import runs as run_store

RUNS = cast(sa.Table, Run.__table__)
NODES = cast(sa.Table, NodeRun.__table__)
LEDGER = cast(sa.Table, CreditEntry.__table__)
CREDITS = 1000


@dataclass
class Engine:
    ctx: AppContext
    account_id: str

    @property
    def db(self) -> Database:
        return self.ctx.db

    async def workflow(self, graph: dict[str, Any], name: str = "wf") -> str:
        row = await self.db.write(
            lambda c: workflows.create(c, account_id=self.account_id, name=name, graph_json=graph)
        )
        return str(row.id)

    async def accept(
        self, workflow_id: str, run_input: dict[str, Any] | None = None, **fields: Any
    ) -> str:
        request = RunRequest(self.account_id, workflow_id, run_input, True, "business", **fields)
        accepted = await self.ctx.acceptor.accept(request)
        return str(accepted.answer["run_id"])

    async def cancel(self, run_id: str) -> None:
        """As the cancel endpoint asks: the flag committed, then the executor told."""
        await self.db.write(lambda c: run_store.request_cancel(c, [run_id]))
        await self.ctx.dispatcher.cancel(run_id)

    async def run(self, run_id: str) -> Record:
        query = sa.select(RUNS).where(RUNS.c.id == run_id)
        return await self.db.read(lambda c: c.execute(query).one())

    async def nodes(self, run_id: str) -> dict[str, Record]:
        query = sa.select(NODES).where(NODES.c.run_id == run_id)
        rows = await self.db.read(lambda c: c.execute(query).all())
        return {row.node_id: row for row in rows}

    async def ledger(self, run_id: str) -> dict[tuple[str, str], int]:
        """(node id, kind) -> amount of the run's ledger rows (node id "" for the run's
        hold and release)."""
        query = sa.select(LEDGER.c.node_id, LEDGER.c.kind, LEDGER.c.amount).where(
            LEDGER.c.run_id == run_id
        )
        rows = await self.db.read(lambda c: c.execute(query).all())
        found: dict[tuple[str, str], int] = {}
        for node_id, kind, amount in rows:
            assert (node_id, kind) not in found, f"{kind} of {node_id!r} twice"
            found[(node_id, kind)] = amount
        return found

    async def balance(self) -> int:
        row = await self.db.read(lambda c: accounts.by_id(c, self.account_id))
        assert row is not None
        return int(row.credits_balance)

    async def wait(self, run_id: str, timeout: float = 30.0) -> Record:
        """The run once it ended."""
        return await self.until(run_id, lambda run, _: run.status != "running", timeout)

    async def until(
        self,
        run_id: str,
        condition: Callable[[Record, dict[str, Record]], bool],
        timeout: float = 30.0,
    ) -> Record:
        """The run once ``condition`` holds of it and its node rows."""
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            run = await self.run(run_id)
            if condition(run, await self.nodes(run_id)):
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} not there after {timeout}s: {run.status}")
            await asyncio.sleep(delay)
            delay = min(0.2, delay * 1.5)


def assert_balanced(ledger: dict[tuple[str, str], int]) -> int:
    """The run's hold came back whole as charges plus the release; the charges' sum."""
    charged = sum(amount for (_, kind), amount in ledger.items() if kind == "charge")
    assert ledger[("", "hold")] == charged + ledger.get(("", "release"), 0), ledger
    return charged


@pytest.fixture
async def engine(app: FastAPI) -> Engine:
    ctx: AppContext = app.state.ctx
    account = await ctx.db.write(
        lambda c: accounts.create(
            c, email="engine@example.com", password_hash="-", plan="business", credits=CREDITS
        )
    )
    return Engine(ctx, account.id)
