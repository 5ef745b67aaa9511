"""A checked workflow graph: its nodes, the inputs of each in edge order, the downstream
sets, a topological order, its batch regions, and what is derived from them alone (the
credits a run holds, its branch points, whether it runs at once).

engine/graph_checks.py builds it from a React Flow graph (validating it against the node
catalog); engine/batches.py finds its regions and expands them in a run. No database or
HTTP here: the same graph always gives the same answer.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeloom.engine import branches
from nodeloom.nodes.loop import EXHAUSTED
from nodeloom.nodes.media_inputs import MEDIA_INPUT_TYPES
from nodeloom.sdk._node import DEFAULT_OUTPUT, ERROR_OUTPUT, NodeType, Params


@dataclass(frozen=True)
class Region:
    """The nodes a ForEach runs once per item, and the collectors that gather them; or the
    nodes a Repeat runs once per iteration, and its Until (its one collector)."""

    for_each: str  # the node that opens it: a ForEach, or a Repeat
    nodes: tuple[str, ...]  # in graph order, the ForEach and collectors not included
    collectors: tuple[str, ...]
    concurrency: int
    fail_fast: bool
    max_items: int  # the param, or the server's cap: what the estimate holds for
    repeat: bool = False  # a Repeat's: iterations, one after another

    @property
    def members(self) -> frozenset[str]:
        return frozenset(self.nodes)


@dataclass
class Batches:
    """What a checked graph knows about its batches: regions by ForEach, the region of each
    region node and collector, and (in a run's expanded graph) each instance's drawn node
    and item index."""

    regions: dict[str, Region] = field(default_factory=dict)
    region_of: dict[str, str] = field(default_factory=dict)  # region node -> its ForEach
    collected_by: dict[str, str] = field(default_factory=dict)  # collector -> its ForEach
    # instance id -> (drawn node id, item index, item count); ForEach#k -> (ForEach id, k, n)
    instances: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    counts: dict[str, int | None] = field(default_factory=dict)  # item count per ForEach
    drawn: Graph | None = None  # in a run's graph: the graph as drawn

    def __bool__(self) -> bool:
        return bool(self.regions)

    def region_of_instance(self, node_id: str) -> Region | None:
        """The region an instance (not a ForEach's item pick, nor a Repeat's iteration
        start) belongs to; a Repeat's ``U#k`` belongs to its region."""
        found = self.instances.get(node_id)
        if found is None or found[0] in self.regions:
            return None
        opener = self.region_of.get(found[0]) or self.collected_by[found[0]]
        return self.regions[opener]

    def next_iteration(self, node_id: str, ports: tuple[str, ...] | None) -> tuple[str, int]:
        """When ``node_id`` completed taking ``ports``: the Repeat that gets another
        iteration and its iteration count with it, or ("", 0) when none does — node_id is
        not the Until instance of a Repeat's last iteration, or its condition held, or the
        Repeat reached its ``max_iterations``."""
        found = self.instances.get(node_id)
        if found is None or ports != (EXHAUSTED,):
            return "", 0
        opener = self.collected_by.get(found[0])
        region = self.regions.get(opener) if opener is not None else None
        if region is None or not region.repeat:
            return "", 0
        iterations = self.counts.get(region.for_each) or 0
        if found[1] + 1 != iterations or iterations >= region.max_items:
            return "", 0
        return region.for_each, iterations + 1

    def ends_repeat(self, node_id: str) -> bool:
        """Is ``node_id`` a drawn Until (the end of a Repeat region)?"""
        opener = self.collected_by.get(node_id)
        return opener is not None and self.regions[opener].repeat

    def in_repeat(self, node_id: str) -> bool:
        """Is ``node_id`` an instance of a Repeat region's node (its output cache is not
        read: an iteration runs again to produce something new)?"""
        region = self.region_of_instance(node_id)
        return region is not None and region.repeat


@dataclass(frozen=True)
class GraphNode:
    id: str
    type: str
    index: int
    node: NodeType
    params: Params


@dataclass
class Graph:
    nodes: dict[str, GraphNode]
    # node id -> input name -> source node ids, in edge order
    inputs: dict[str, dict[str, list[str]]]
    downstream: dict[str, list[str]]
    order: list[str] = field(default_factory=list)
    # node id -> input name -> the source output each source in ``inputs`` feeds it from,
    # in the same order; an input not here is fed from its sources' ``output`` (or their
    # only branch output).
    ports: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # ForEach regions, and in a run's expanded graph its item instances (engine/batches.py).
    batches: Batches = field(default_factory=Batches)

    def sources(self, node_id: str) -> list[tuple[str, str, str]]:
        """Every edge into ``node_id`` as (input name, source node, source output)."""
        found: list[tuple[str, str, str]] = []
        ports = self.ports.get(node_id, {})
        for name, sources in self.inputs[node_id].items():
            names = ports.get(name)
            for i, source in enumerate(sources):
                found.append((name, source, names[i] if names else DEFAULT_OUTPUT))
        return found

    @functools.cached_property
    def error_routed(self) -> frozenset[str]:
        """The nodes an edge leaves from their ``error`` output: their failure goes down it."""
        return frozenset(
            source
            for target, by_input in self.ports.items()
            for name, names in by_input.items()
            for source, port in zip(self.inputs[target][name], names, strict=True)
            if port == ERROR_OUTPUT
        )

    @functools.cached_property
    def rank(self) -> dict[str, int]:
        """Each node's place in ``order``."""
        return {node_id: i for i, node_id in enumerate(self.order)}

    def estimate_credits(
        self, items: dict[str, int] | None = None, lengths: Mapping[str, int] | None = None
    ) -> int:
        """Credits a run holds: of the ways through the graph's branches, the most expensive
        (engine/branches.py). ``items``: the item count of ForEach nodes known before the
        run (the others hold their bound). ``lengths``: the length in ms of the input a
        node's price follows, where a media input's file tells it (engine/media_lengths.py)."""
        if self.batches:
            cost = costs(self, items or {}, lengths)
        else:
            known = lengths or {}
            cost = {
                n.id: n.node.estimate_credits(n.params, known.get(n.id))
                for n in self.nodes.values()
            }
        total = sum(cost.values())
        if self.branching:
            total -= branches.savings(self, cost)
        return total

    @functools.cached_property
    def length_feeds(self) -> dict[str, GraphNode]:
        """Node id -> the media input node feeding the input its price follows: the nodes
        priced by the length of a media input's file (engine/media_lengths.py)."""
        found: dict[str, GraphNode] = {}
        for node in self.nodes.values():
            name = node.node.length_input
            if name is None or node.node.spec.cost.per_second == 0:
                continue
            sources = self.inputs.get(node.id, {}).get(name, [])
            if len(sources) == 1 and self.nodes[sources[0]].type in MEDIA_INPUT_TYPES:
                found[node.id] = self.nodes[sources[0]]
        return found

    @functools.cached_property
    def branching(self) -> bool:
        """Does a run take some outputs of some node and not others (engine/branches.py)?"""
        return bool(branches.branch_points(self))

    @functools.cached_property
    def all_instant(self) -> bool:
        """Every node finishes at once on the event loop (``NodeType.instant``), so a run
        may be executed while it is accepted (engine/submit.py). Never with a ForEach: its
        items are added to the run as it goes (engine/batches.py)."""
        if self.batches:
            return False
        return all(n.node.instant(n.params) for n in self.nodes.values())


def costs(
    graph: Graph, known: Mapping[str, int], lengths: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Credits held for each drawn node of a run: a node outside a region once, a region's
    node once per item — ``known`` items when the count is known before the run, else the
    region's bound (its ``max_items``). ``lengths``: the known length in ms of the input a
    node's price follows (engine/media_lengths.py)."""
    lengths = lengths or {}
    regions = graph.batches.regions
    found: dict[str, int] = {}
    for node in graph.nodes.values():
        for_each = graph.batches.region_of.get(node.id)
        times = 1 if for_each is None else known.get(for_each, regions[for_each].max_items)
        found[node.id] = node.node.estimate_credits(node.params, lengths.get(node.id)) * times
    return found
