"""The instant prefix of a run that queue workers execute (scale-out, ADR 0018): its instant
roots, and the instant nodes they alone make runnable, executed while the run is accepted.

A run of ``TextInput -> Delay -> TextTemplate`` accepted pending on PostgreSQL used to
queue its ``TextInput`` as a job: a defer, a fetch, a claim step, a finish step and the
job's completion, on a worker, before the ``Delay`` — the node that needs a worker — could
even be queued. Executed at acceptance instead, the prefix is recorded in the acceptance
batch (started and ended under the accepting process's claim, like an all-instant run in
engine/submit.py), and the batch queues what it made runnable: the run's first job is the
``Delay``'s, deferred right after the acceptance commits.

Only plain runs: a run with batch regions (its items are counted against the account's
cap in the database, engine/items.py) is accepted as before. A node that turns out to need
a sandbox, or a prefix longer than one step may execute, makes the caller accept the run
as before too (None): nothing executed here is kept unless the whole prefix was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from nodeloom.db.models import utcnow
from nodeloom.engine import stepper
from nodeloom.engine.executor import NodeTask
from nodeloom.engine.graph import Graph
from nodeloom.engine.run_state import Outcome, RunState
from nodeloom.engine.transitions import Batch
from nodeloom.states import NodeStatus


def applies(graph: Graph) -> bool:
    """Whether a run of ``graph`` accepted for queue workers may have its prefix executed
    at acceptance (an all-instant run is executed whole instead, engine/submit.py)."""
    return not graph.all_instant and not graph.batches


async def execute_prefix(
    state: RunState,
    batch: Batch,
    owner: str,
    produce: Callable[[NodeTask], Awaitable[Outcome]],
) -> dict[str, Outcome] | None:
    """Execute the instant nodes among the queued roots of ``state`` (a run being accepted,
    ``batch`` creating it) and the instant nodes they make runnable, recorded in ``batch``
    under ``owner``'s claim; every other node they make runnable is queued for a job. The
    outcomes by node ({} and the batch untouched when no root is instant), or None when
    some node could not be executed here (``produce`` may raise NeedsSandbox: the caller
    then accepts a fresh copy of the run)."""
    roots = [n for n in state.with_status(NodeStatus.QUEUED) if stepper.is_instant(state, n)]
    if not roots or batch.created is None:
        return {}
    # Never queued for a job after all: their rows go from pending to running, as a driven
    # run's do (no queued_at).
    queued = batch.created.queued - set(roots)
    batch.created = dataclasses.replace(batch.created, queued=queued)
    now = utcnow()
    for node_id in roots:
        state.start(batch, node_id, now, owner)
    outcomes: dict[str, Outcome] = {}

    async def execute(node_id: str) -> Outcome:
        outcome = outcomes[node_id] = await produce(NodeTask.of(state, node_id))
        return outcome

    def advance_more() -> list[str]:
        # As a finishing job does (steps._advance): instant nodes started under the same
        # claim, the rest queued for jobs; the run ends here if every node ended (a failed
        # root skips its descendants).
        at = utcnow()
        instant = [n for n in state.runnable() if stepper.is_instant(state, n)]
        for node_id in instant:
            state.start(batch, node_id, at, owner)
        stepper.advance(state, batch, at)
        return instant

    left = await stepper.run_instant(state, batch, roots, execute, advance_more, lambda: False)
    return None if left else outcomes
