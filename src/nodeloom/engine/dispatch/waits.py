"""Which Procrastinate queue a node's job goes to (dispatch/queue.py).

A node that only waits on the event loop (a provider call in flight, a child run) holds no
sandbox process and no execution slot, so a worker can wait on hundreds of them at once; a
node that computes needs a sandbox process or an execution slot, of which a worker has few.
Each worker therefore serves two queues, each with its own job slots: ``WAIT_QUEUE`` with
``worker_wait_concurrency`` slots, ``QUEUE`` with ``worker_concurrency``. A worker never
takes more computing nodes than it can start, and waiting nodes never starve them of slots.

``Delay`` waits too, but the executor runs it under an execution slot like any node that is
not a provider adapter, so it stays on ``QUEUE``: on ``WAIT_QUEUE`` a worker would hold
hundreds of them waiting for a slot that another worker may have free.
"""

from __future__ import annotations

from nodeloom.engine.batches import SEPARATOR
from nodeloom.engine.graph import Graph, GraphNode
from nodeloom.nodes.approval import APPROVAL_TYPE
from nodeloom.nodes.subworkflow import WORKFLOW_TYPE
from nodeloom.settings import Settings

QUEUE = "nodes"  # nodes that compute: a sandbox process or an execution slot each
WAIT_QUEUE = "waits"  # nodes that only wait on the event loop


def node_of(graph: Graph, node_id: str) -> GraphNode | None:
    """The node ``node_id`` names: itself, or for an item instance (``<node>#<k>``) of a
    graph not expanded, the node as drawn (same type and params)."""
    return graph.nodes.get(node_id) or graph.nodes.get(node_id.split(SEPARATOR, 1)[0])


def may_wait(node: GraphNode) -> bool:
    """Could this node go to ``WAIT_QUEUE``, whatever credential it names?"""
    return node.type in (WORKFLOW_TYPE, APPROVAL_TYPE) or node.node.spec.adapter


def credential_of(node: GraphNode) -> str | None:
    """The id of the credential its params name, if any."""
    credential_id = getattr(node.params, "credential", None)
    return str(credential_id) if credential_id else None


def queue_of(node: GraphNode, settings: Settings, credential_kind: str | None) -> str:
    """``WAIT_QUEUE`` for a Workflow node (it waits for its child run), an Approval node (it
    waits for a person) and a node that will
    call its provider (``NodeType.waits_on_provider``, as the executor decides it);
    ``QUEUE`` for every other. ``credential_kind``: the kind of the credential it names."""
    if node.type in (WORKFLOW_TYPE, APPROVAL_TYPE):
        return WAIT_QUEUE
    if node.node.waits_on_provider(node.params, settings, credential_kind):
        return WAIT_QUEUE
    return QUEUE
