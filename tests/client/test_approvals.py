"""Approvals through the Python client and the ``nodeloom approvals`` commands, against a real
server: a run waits on its Approval node, the CLI lists and approves it, the client rejects
another; each run completes down the output decided."""

from __future__ import annotations

import json
import time

from nodeloom.client import Client
from tests.client.conftest import Account, Live, cli
from tests.runs_helpers import g, n


def gated() -> dict[str, object]:
    return g(
        [
            n("in", "TextInput", text="a cut"),
            n("gate", "Approval", prompt="Render it?", allow_edit=True),
            n("yes", "TextTemplate", template="rendered: {{ text }}"),
            n("no", "TextTemplate", template="shelved: {{ text }}"),
        ],
        [
            {"id": "1", "source": "in", "target": "gate"},
            {"id": "2", "source": "gate", "target": "yes", "sourceHandle": "approved"},
            {"id": "3", "source": "gate", "target": "no", "sourceHandle": "rejected"},
        ],
    )


def waiting_on(nl: Client, run_id: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        for item in nl.approvals.list().data:
            if item.run_id == run_id:
                return item.id
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_cli_lists_and_approves(live: Live, account: Account, nl: Client) -> None:
    wf = nl.workflows.create(gated(), name="gated-cli")
    run = nl.workflows.execute(wf.id, cache=False)
    approval = waiting_on(nl, run.id)
    assert {x.node_id: x.status for x in nl.runs.get(wf.id, run.id).node_runs}["gate"] == (
        "waiting"
    )
    env = {"NODELOOM_URL": live.url, "NODELOOM_API_KEY": account.api_key}

    done = cli("approvals", "list", "--json", env=env)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [x["id"] for x in listed] == [approval]
    assert listed[0]["prompt"] == "Render it?" and listed[0]["input"]["text"] == "a cut"
    table = cli("approvals", "list", env=env)
    assert approval in table.stdout and "Render it?" in table.stdout

    done = cli("approvals", "approve", approval, "-m", "ship it", "--text", "the cut", env=env)
    assert done.returncode == 0, done.stderr
    assert "approved: ship it" in done.stderr
    finished = run.wait(timeout=60)
    assert finished.status == "completed"
    outputs = {x.node_id: x for x in finished.node_runs}
    assert outputs["no"].status == "skipped"
    assert nl.artifacts.read(outputs["yes"].artifact_id or "") == b"rendered: the cut"

    again = cli("approvals", "reject", approval, env=env)
    assert again.returncode != 0 and "conflict" in again.stderr.lower()


def test_the_client_rejects(nl: Client) -> None:
    wf = nl.workflows.create(gated(), name="gated-client")
    run = nl.workflows.execute(wf.id, cache=False)
    approval = waiting_on(nl, run.id)
    decided = nl.approvals.reject(approval, comment="not yet")
    assert decided.status == "rejected" and decided.comment == "not yet"
    assert nl.approvals.get(approval).decided_by == "api"
    finished = run.wait(timeout=60)
    assert {x.node_id: x.status for x in finished.node_runs}["no"] == "completed"
