"""Every change of run and node state goes through here, as a ``Batch`` applied in one
transaction together with its artifact rows, credit-ledger rows and events.

An executor collects what one step of a run changed (nodes finished, nodes started, the run
ended) into a batch, so a step costs one commit however many transitions it holds. Events
get their ``seq`` when the batch is applied, numbered on from the run's last seq
(engine/stepper.py says where that comes from and why no two writers of one run overlap),
so the log has no gaps and commit order equals ``seq`` order.

A batch may also create its run (``Batch.created``: accepting it). Then nobody else can see
the run's rows yet, so instead of inserting them pending and updating them, the batch's
transitions are folded into the rows it inserts: one multi-row INSERT per table whatever
the batch holds. The folding checks each transition against the same allowed from-states
(``states.NODE_FROM``) the conditional UPDATEs name. A run of instant nodes is accepted,
executed and finished this way in one transaction (engine/submit.py).

The package's parts: changes.py (the batch, pure data), statements.py (the SQL, built once),
rows.py (the rows a batch adds), apply.py (a step of a run that exists) and create.py (a batch
that creates its run). Callers import from here.
"""

from nodeloom.engine.transitions.apply import apply
from nodeloom.engine.transitions.changes import (
    AddedNode,
    Batch,
    NewArtifact,
    NewRun,
    WebhookAsRead,
    WorkflowChanged,
)
from nodeloom.engine.transitions.create import created_alone
from nodeloom.engine.transitions.rows import numbered

__all__ = [
    "AddedNode",
    "Batch",
    "NewArtifact",
    "NewRun",
    "WebhookAsRead",
    "WorkflowChanged",
    "apply",
    "created_alone",
    "numbered",
]
