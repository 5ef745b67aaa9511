"""Driver slots in the embedded mode (``max_active_runs``): a run whose nodes only wait — for
a child run, a person — gives its slot back, so waits never starve other runs and a parent
never holds the slot its own child needs."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.test_approvals import all_pending, gated, pending, start
from tests.conftest import User
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    # Two slots: an account drives one run at a time (all but one of them).
    return {"max_active_runs": 2, "rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


def parent_of(child: str) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", text="cats"),
            n("sub", "Workflow", workflow_id=child),
            n("out", "TextTemplate", template="[{{ text }}]"),
        ],
        [e("in", "sub", "topic"), e("sub", "out")],
    )


CHILD = g(
    [
        n("in", "TextInput", key="topic", text="x"),
        n("wait", "Delay", seconds=0.1),  # not instant: the child needs a slot of its own
        n("t", "TextTemplate", template="About {{ text }}"),
    ],
    [e("in", "wait"), e("wait", "t")],
)


class TestWaitsHoldNoSlot:
    async def test_a_parent_waiting_for_its_child_leaves_it_the_slot(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        child = await create_workflow(client, owner, CHILD)
        parent = await create_workflow(client, owner, parent_of(child))
        runs = []
        for _ in range(3):  # more parents than the account's one slot
            r = await execute(client, owner, parent, {"cache": False})
            assert r.status_code == 202, r.text
            runs.append(r.json()["run_id"])
        for run_id in runs:
            done = await wait_for_run(client, owner, parent, run_id, timeout=60)
            assert done["status"] == "completed", done
            out = next(nr for nr in done["node_runs"] if nr["node_id"] == "out")
            r = await client.get(f"/api/v1/artifacts/{out['artifact_id']}", headers=owner.headers)
            assert r.text == "[About cats]"

    async def test_runs_waiting_for_people_let_other_runs_through(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        waiting = [await start(client, owner, gated()) for _ in range(3)]
        await all_pending(client, owner, waiting[-1][1], 1)  # the last of them waits too
        metrics = (await client.get("/metrics")).text
        assert "\nnodeloom_runs_parked 3\n" in metrics, metrics
        busy = await create_workflow(client, owner, CHILD)
        r = await execute(client, owner, busy, {"input": {"topic": "dogs"}, "cache": False})
        assert r.status_code == 202, r.text
        done = await wait_for_run(client, owner, busy, r.json()["run_id"], timeout=60)
        assert done["status"] == "completed", done
        for _, run_id in waiting:  # decided: each takes a slot again and goes on
            item = await pending(client, owner, run_id)
            r = await client.post(f"/api/v1/approvals/{item['id']}/approve", headers=owner.headers)
            assert r.status_code == 200, r.text
        for wf, run_id in waiting:
            done = await wait_for_run(client, owner, wf, run_id, timeout=60)
            assert done["status"] == "completed", done

    async def test_a_parked_run_is_cancelled_at_once(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf, run_id = await start(client, owner, gated())
        await pending(client, owner, run_id)
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202, r.text
        done = await wait_for_run(client, owner, wf, run_id, timeout=30)
        assert done["status"] == "cancelled", done
