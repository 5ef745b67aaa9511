"""Retry at the engine (engine/retry.py), on SQLite (a driver) and PostgreSQL (queue
workers): a retry accepted by the ``Acceptor`` starts from the failed node, reuses what
completed with its artifacts and without charging it again, and records which saved version
it ran; what ``plan`` refuses."""

from __future__ import annotations

import pytest

from nodeloom.errors import Conflict, InvalidRequest, NotFound
from tests.engine.accepting import Engine, assert_balanced, engine
from tests.runs_helpers import FAILS_PART_WAY

__all__ = ["engine"]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


FAILING = FAILS_PART_WAY
FIXED = {"bad": {"template": "fixed {{ text }}"}}


async def failed_run(engine: Engine) -> tuple[str, str]:
    wf = await engine.workflow(FAILING)
    run_id = await engine.accept(wf)
    run = await engine.wait(run_id)
    assert run.status == "failed" and run.error["node_id"] == "bad", run.error
    return wf, run_id


class TestRetry:
    async def test_starts_from_the_failed_node_and_charges_only_what_runs_again(
        self, engine: Engine
    ) -> None:
        wf, first = await failed_run(engine)
        before = await engine.nodes(first)
        spent = await engine.balance()
        second = await engine.accept(wf, retry_of=first, retry_params=FIXED)
        run = await engine.wait(second)
        assert run.status == "completed", run.error
        assert run.retried_from == first
        nodes = await engine.nodes(second)
        # Reused: completed at once with the same artifact, cached, not charged.
        for node_id in ("in", "a", "side"):
            assert nodes[node_id].status == "completed"
            assert nodes[node_id].cached and nodes[node_id].credits_used == 0
            assert nodes[node_id].artifact_id == before[node_id].artifact_id
            assert nodes[node_id].attempts == 0, node_id  # never started
        for node_id in ("bad", "after"):
            assert nodes[node_id].status == "completed" and not nodes[node_id].cached
        ledger = await engine.ledger(second)
        assert {node for (node, kind) in ledger if kind == "charge"} == {"bad", "after"}
        assert ledger[("", "hold")] == 2  # only what runs again is held
        assert assert_balanced(ledger) == run.credits_used == 2
        assert await engine.balance() == spent - 2
        # The first run's charges stand as they were.
        assert assert_balanced(await engine.ledger(first)) == 2

    async def test_records_the_version_it_ran_unless_params_changed_it(
        self, engine: Engine
    ) -> None:
        wf, first = await failed_run(engine)
        assert (await engine.run(first)).workflow_version == 1
        same = await engine.accept(wf, retry_of=first)
        run = await engine.wait(same)
        assert run.status == "failed" and run.workflow_version == 1
        assert assert_balanced(await engine.ledger(same)) == 0  # nothing ran again that costs
        changed = await engine.accept(wf, retry_of=first, retry_params=FIXED)
        run = await engine.wait(changed)
        assert run.status == "completed" and run.workflow_version is None

    async def test_only_a_failed_or_cancelled_run_of_that_workflow(self, engine: Engine) -> None:
        wf, failed = await failed_run(engine)
        fixed = await engine.accept(wf, retry_of=failed, retry_params=FIXED)
        assert (await engine.wait(fixed)).status == "completed"
        with pytest.raises(Conflict):
            await engine.accept(wf, retry_of=fixed)
        other = await engine.workflow(FAILING, name="other")
        with pytest.raises(NotFound):
            await engine.accept(other, retry_of=failed)
        with pytest.raises(InvalidRequest) as caught:
            await engine.accept(wf, retry_of=failed, retry_params={"nope": {"text": "y"}})
        assert [err.pointer for err in caught.value.errors] == ["/params/nope"]

    async def test_changed_params_run_the_node_and_what_it_feeds_again(
        self, engine: Engine
    ) -> None:
        wf, first = await failed_run(engine)
        params = {"a": {"template": "B {{ text }}"}, **FIXED}
        second = await engine.accept(wf, retry_of=first, retry_params=params)
        run = await engine.wait(second)
        assert run.status == "completed", run.error
        nodes = await engine.nodes(second)
        assert {k for k, row in nodes.items() if row.cached} == {"in", "side"}
        ledger = await engine.ledger(second)
        assert {node for (node, kind) in ledger if kind == "charge"} == {"a", "bad", "after"}
        assert assert_balanced(ledger) == 3
