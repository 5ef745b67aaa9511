"""The in-process driver (engine/runner.py) adopting runs that another executor left behind,
on SQLite: the same stored state, the same rules as the queue steps (engine/stepper.py).
Runs are brought into shape by calling the queue's step functions directly (they run on
SQLite too), then a ``RunDriver`` takes over, in a runtime whose dispatcher is not started
(no sweep adopts anything behind the test's back)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from nodeloom.engine import steps
from nodeloom.engine.runner import RunDriver
from nodeloom.runtime import Runtime
from nodeloom.settings import Settings
from nodeloom.store import accounts, workflows
from tests.engine.test_steps import DIAMOND, World, job


@pytest.fixture
async def runtime(settings: Settings) -> AsyncIterator[Runtime]:
    """A runtime's parts a driver needs, started — all but its dispatcher (whose sweep would
    adopt the test's runs) and background chores."""
    built = Runtime.build(settings)
    built.identity.open()
    built.scratch.open()
    await built.sandbox.start()
    try:
        yield built
    finally:
        await built.sandbox.stop()
        built.scratch.close()
        await built.db.dispose()


@pytest.fixture
async def world(runtime: Runtime) -> World:
    db = runtime.db
    account = await db.write(
        lambda c: accounts.create(
            c, email="driver@example.com", password_hash="-", plan="business", credits=100
        )
    )
    workflow = await db.write(
        lambda c: workflows.create(c, account_id=account.id, name="wf", graph_json=DIAMOND)
    )
    return World(db, runtime.registry, runtime.settings, account.id, workflow.id)


async def drive(runtime: Runtime, run_id: str) -> None:
    await RunDriver(runtime.env, run_id, runtime.identity.token).run()


class TestAdoptedRuns:
    async def test_an_interrupted_node_runs_again_and_the_run_completes(
        self, runtime: Runtime, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)  # then its worker died
        await drive(runtime, run_id)
        assert set((await world.statuses(run_id)).values()) == {"completed"}
        query = sa.text("select attempts from node_runs where run_id = :r and node_id = 'a'")
        attempts = await world.db.read(lambda c: c.execute(query, {"r": run_id}).scalar())
        assert attempts == 2
        run = await world.run_row(run_id)
        assert run.status == "completed" and run.credits_used == 3
        await world.assert_consistent(run_id)

    async def test_a_node_started_node_max_attempts_times_crashes(
        self, runtime: Runtime, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        await world.step(steps.requeue, run_id, "a", job(1), 2, world.graphs)
        await world.step(steps.claim, run_id, "a", job(2), world.graphs)  # started twice: the limit
        assert runtime.settings.node_max_attempts == 2
        await drive(runtime, run_id)
        run = await world.run_row(run_id)
        assert run.status == "failed" and run.error["code"] == "node_crashed"
        assert set((await world.statuses(run_id)).values()) == {"failed", "skipped"}
        await world.assert_consistent(run_id)

    async def test_a_run_whose_graph_no_longer_validates_fails_as_the_steps_fail_it(
        self, runtime: Runtime, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.ran(run_id, "a", job(1), 0)
        await world.ran(run_id, "b", job(2))
        await world.break_graph(run_id)
        await drive(runtime, run_id)
        await world.assert_failed_unrunnable(run_id)

    async def test_a_cancel_asked_before_adoption_ends_the_run_cancelled(
        self, runtime: Runtime, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        await world.db.write(lambda c: steps.run_store.request_cancel(c, [run_id]))
        await drive(runtime, run_id)
        run = await world.run_row(run_id)
        assert run.status == "cancelled" and run.error["code"] == "cancelled"
        assert set((await world.statuses(run_id)).values()) == {"cancelled"}
        await world.assert_consistent(run_id)
