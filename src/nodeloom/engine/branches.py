"""Branches in the graph — pure, no I/O (docs/decisions.md, ADR 0025).

A node may have several outputs: an ``If`` has ``true`` and ``false``, a ``Switch`` one per
case and ``default``, and every node has ``error``. Each edge leaves one output (its
``sourceHandle``). When a node ends, some of its outputs are *taken*:

- a completed node takes every output (or, with branches, the ones it said: an If takes
  one), never ``error``;
- a failed node whose ``error`` output has an edge takes ``error`` alone: its error, as
  JSON, is its artifact, and the run goes on;
- a skipped or cancelled node takes nothing.

An edge is *live* when its output was taken, *dead* when its source ended without taking
it, and *waiting* while its source has not ended. A node runs when every edge into it is
live; it is skipped (``branch_not_taken``) as soon as one is dead. A ``Merge`` waits until
every edge into it settled, runs when at least one is live, and is skipped when none is.

The estimate of a graph with branches holds the most expensive way through it: of the
nodes that only run when a given output is taken (the *exclusive set* of that output), a
run pays for one output of each branching node — the dearest — not for all. A node with an
``error`` edge is itself charged only on its other outputs' side (a failed node costs
nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from nodeloom.sdk._node import DEFAULT_OUTPUT, ERROR_OUTPUT
from nodeloom.states import NodeStatus


class Graph(Protocol):
    """What this module reads of a checked graph (engine/graph.py ``Graph``, which imports
    this module: named structurally, so the two do not import each other)."""

    @property
    def nodes(self) -> Mapping[str, Any]: ...

    @property
    def downstream(self) -> Mapping[str, list[str]]: ...

    @property
    def order(self) -> list[str]: ...

    @property
    def error_routed(self) -> frozenset[str]: ...

    def sources(self, node_id: str) -> list[tuple[str, str, str]]: ...


EdgeState = Literal["live", "dead", "waiting"]
SETTLED = frozenset({NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.SKIPPED})


def edge_state(
    status: NodeStatus | None,
    port: str,
    taken: tuple[str, ...] | None,
    error_sent: bool,
) -> EdgeState:
    """The state of an edge leaving output ``port`` of a node in ``status`` that took
    ``taken`` (None: all its outputs) and, if it failed, sent its error (``error_sent``)."""
    if status == NodeStatus.COMPLETED:
        if port == ERROR_OUTPUT:
            return "dead"
        return "live" if taken is None or port in taken else "dead"
    if status == NodeStatus.FAILED:
        return "live" if port == ERROR_OUTPUT and error_sent else "dead"
    if status in (NodeStatus.SKIPPED, NodeStatus.CANCELLED):
        return "dead"
    return "waiting"


def decide(states: list[EdgeState], merge: bool) -> Literal["run", "skip", "wait"]:
    """What a pending node does, given the states of the edges into it."""
    if merge:
        if "waiting" in states:
            return "wait"
        return "run" if "live" in states else "skip"
    if "dead" in states:
        return "skip"
    return "wait" if "waiting" in states else "run"


def branch_points(graph: Graph) -> dict[str, tuple[str, ...]]:
    """The nodes of which a run takes some outputs and not others, with those outputs: the
    nodes with branches, and the nodes whose ``error`` output has an edge."""
    found: dict[str, tuple[str, ...]] = {}
    for node_id, node in graph.nodes.items():
        names = node.node.output_names(node.params)
        routed = node_id in graph.error_routed
        if names != (DEFAULT_OUTPUT,) or routed:
            found[node_id] = (*names, ERROR_OUTPUT) if routed else names
    return found


def with_branches(graph: Graph) -> set[str]:
    """The nodes with several outputs of which a run takes one (an If, a Switch)."""
    return {
        node_id
        for node_id, node in graph.nodes.items()
        if node.node.output_names(node.params) != (DEFAULT_OUTPUT,)
    }


def exclusive(graph: Graph, node_id: str, port: str) -> set[str]:
    """The nodes skipped when ``node_id`` does not take ``port`` and every other output of
    every node is taken: the nodes that only run through that output."""
    dead: set[str] = set()
    changed = True
    candidates = list(graph.downstream[node_id])
    while changed:
        changed = False
        for target in list(candidates):
            if target in dead:
                continue
            states: list[EdgeState] = []
            for _, source, source_port in graph.sources(target):
                off = (source == node_id and source_port == port) or source in dead
                states.append("dead" if off else "live")
            if decide(states, graph.nodes[target].node.flow_role == "merge") == "skip":
                dead.add(target)
                candidates.extend(graph.downstream[target])
                changed = True
    return dead


def savings(graph: Graph, cost: Mapping[str, int]) -> int:
    """How much less than the sum of ``cost`` over every node the most expensive run of
    ``graph`` costs: at each branching node, every output's exclusive set but the dearest
    is left out. Inner branching nodes are counted first, so an outer set's value already
    leaves out what its own branches save."""
    points = branch_points(graph)
    saved: dict[str, int] = {}
    for node_id in reversed(graph.order):
        ports = points.get(node_id)
        if ports is None:
            continue
        values = {port: _value(exclusive(graph, node_id, port), cost, saved) for port in ports}
        # A node whose failure goes down its error edge is charged only when it completes:
        # its own price belongs with every output but ``error``.
        own = cost.get(node_id, 0) if ERROR_OUTPUT in values else 0
        ways = [v if port == ERROR_OUTPUT else v + own for port, v in values.items()]
        saved[node_id] = own + sum(values.values()) - max(ways, default=0)
    return sum(saved.values())


def _value(nodes: set[str], cost: Mapping[str, int], saved: Mapping[str, int]) -> int:
    return sum(cost.get(n, 0) for n in nodes) - sum(saved.get(n, 0) for n in nodes)
