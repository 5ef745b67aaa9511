"""Batches in the graph — pure, no I/O (docs/adr/0013-batches.md, docs/batches.md).

A ``ForEach`` node opens a *region*: every node reachable from it without passing a
collector (``Collect``, ``CollectImages``, ``CollectVideos``). The region runs once per
item. In the saved graph the region is drawn once; a run *expands* it when the ForEach
completes and its item count is known:

- the ForEach stays one node (its output: the items, a JSON array);
- item k gets ``F#k`` (a ``ForEachItem`` picking item k out of the list) and one instance
  ``x#k`` of every region node x, wired like the drawn nodes: an input from the ForEach
  comes from ``F#k``, from a region node y from ``y#k``, from any other node from that
  node itself (the same artifact for every item);
- a collector takes, on each input the region fed, ``y#0 .. y#n-1`` in item order.

Until then the run's graph leaves the region out and its collectors wait for the ForEach.
A run's node rows are keyed by these instance ids (``x#k``, with the item index in their
own column); the API shows the drawn node id and the item index. So that an instance id
can never be a drawn node's id, a graph with a ForEach may not use ``#`` in node ids.

A ``Repeat`` node opens a region too, closed by one ``Until`` (nodes/loop.py, ADR 0028):
its iterations run one after another, so the run expands it one iteration at a time —
iteration 0 when the Repeat completes, iteration k+1 in the step that completes iteration
k's Until instance ``U#k`` when its condition did not hold and the bound is not reached:

- iteration k gets ``R#k`` (a ``RepeatIteration`` passing on what it starts from: the
  Repeat's output for k = 0, else ``U#(k-1)``'s value), one instance ``x#k`` of every region
  node and ``U#k``, wired as for an item;
- the drawn Until takes the last iteration's ``U#k`` and runs once it ended (a collector
  to the engine), routing the run down ``done`` or ``exhausted``.

Iterations share the ForEach's machinery (instance ids, item index, rows added in the step
that decides them); a failure inside an iteration is the run's (``fail_fast``) unless an
error output carries it.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeloom.engine.graph import Batches, Graph, GraphNode, Region
from nodeloom.errors import FieldError
from nodeloom.nodes.batch import FOR_EACH_ITEM, ForEachParams, ItemParams, split_items
from nodeloom.nodes.loop import EXHAUSTED, REPEAT_ITERATION, IterationParams, RepeatParams
from nodeloom.nodes.text import TextInput, TextInputParams, text_input_value
from nodeloom.sdk._node import NodeFailure

SEPARATOR = "#"
ROOT = "/graph_json"


# Region instances of a Repeat are not bounded by a concurrency: one iteration at a time.
UNBOUNDED = 1_000_000
OPENERS = ("for_each", "repeat")


def instance_id(node_id: str, index: int) -> str:
    return f"{node_id}{SEPARATOR}{index}"


def find_regions(graph: Graph, batch_cap: int, repeat_cap: int) -> list[FieldError]:
    """Fill ``graph.batches`` from the drawn graph; the problems that make it unrunnable."""
    problems: list[FieldError] = []
    nodes = graph.nodes
    openers = [n for n in graph.order if nodes[n].node.batch_role in OPENERS]
    closers = {n for n in nodes if nodes[n].node.batch_role in ("collect", "until")}
    if not openers:
        for node_id in sorted(closers, key=graph.rank.__getitem__):
            problems.append(_problem(graph, node_id, _unconnected(graph, node_id)))
        return problems
    for node_id in graph.order:
        if SEPARATOR in node_id:
            problems.append(
                FieldError(
                    f"{ROOT}/nodes/{nodes[node_id].index}/id",
                    f"node id {node_id!r}: a graph with a ForEach or a Repeat may not use "
                    f"{SEPARATOR!r} in node ids (the run names each item's or iteration's "
                    "node runs <node id>#<index>)",
                )
            )
    batches = graph.batches
    for opener in openers:
        repeat = nodes[opener].node.batch_role == "repeat"
        ends = "until" if repeat else "collect"
        members: set[str] = set()
        gathered: set[str] = set()
        stack = list(graph.downstream[opener])
        while stack:
            current = stack.pop()
            if nodes[current].node.batch_role == ends:
                gathered.add(current)
                continue
            if current in members:
                continue
            members.add(current)
            stack.extend(graph.downstream[current])
        for node_id in members:
            role = nodes[node_id].node.batch_role
            if node_id in batches.region_of or role in OPENERS or role == "until":
                problems.append(_problem(graph, node_id, _nested(repeat, role)))
            batches.region_of.setdefault(node_id, opener)
        for collector in gathered:
            if collector in batches.collected_by:
                what = "iterations of two Repeat" if repeat else "items of two ForEach"
                problems.append(_problem(graph, collector, f"gathers the {what}"))
            batches.collected_by.setdefault(collector, opener)
        if repeat:
            problems.extend(_repeat_shape(graph, opener, members, gathered))
        params = nodes[opener].params
        if isinstance(params, RepeatParams):
            batches.regions[opener] = Region(
                for_each=opener,
                nodes=tuple(sorted(members, key=graph.rank.__getitem__)),
                collectors=tuple(sorted(gathered, key=graph.rank.__getitem__)),
                concurrency=UNBOUNDED,
                fail_fast=True,
                max_items=min(params.max_iterations, repeat_cap),
                repeat=True,
            )
            continue
        assert isinstance(params, ForEachParams)
        batches.regions[opener] = Region(
            for_each=opener,
            nodes=tuple(sorted(members, key=graph.rank.__getitem__)),
            collectors=tuple(sorted(gathered, key=graph.rank.__getitem__)),
            concurrency=params.concurrency,
            fail_fast=params.fail_fast,
            max_items=min(params.max_items or batch_cap, batch_cap),
        )
    for collector in sorted(closers, key=graph.rank.__getitem__):
        gatherer = batches.collected_by.get(collector)
        if gatherer is None:
            problems.append(_problem(graph, collector, _unconnected(graph, collector)))
            continue
        inside = batches.regions[gatherer].members | {gatherer}
        what = "in the region of" if batches.regions[gatherer].repeat else "one of the items of"
        for sources in graph.inputs[collector].values():
            for source in sources:
                if source not in inside:
                    problems.append(
                        _problem(
                            graph, collector, f"takes {source}, which is not {what} {gatherer}"
                        )
                    )
    return problems


def _unconnected(graph: Graph, node_id: str) -> str:
    if graph.nodes[node_id].node.batch_role == "until":
        return "ends nothing: connect it after a Repeat, at the end of the nodes it repeats"
    return "gathers nothing: connect it after a ForEach"


def _nested(repeat: bool, role: str | None) -> str:
    if not repeat and role not in ("repeat", "until"):
        return "is inside two ForEach regions (no nesting yet)"
    return "is inside two ForEach or Repeat regions (no nesting yet)"


def _repeat_shape(
    graph: Graph, repeat: str, members: set[str], gathered: set[str]
) -> list[FieldError]:
    """A Repeat's region ends at exactly one Until, and no node of it takes that Until's
    output (the region runs before the Until does)."""
    if not gathered:
        return [
            _problem(graph, repeat, "never reaches an Until: end the nodes it repeats with one")
        ]
    if len(gathered) > 1:
        names = ", ".join(sorted(gathered, key=graph.rank.__getitem__))
        return [_problem(graph, repeat, f"reaches several Until nodes ({names}): it ends at one")]
    (until,) = gathered
    return [
        _problem(graph, node_id, f"takes {until}, the Until of its own Repeat {repeat}")
        for node_id in sorted(members, key=graph.rank.__getitem__)
        if until in {s for srcs in graph.inputs[node_id].values() for s in srcs}
    ]


def _problem(graph: Graph, node_id: str, message: str) -> FieldError:
    node = graph.nodes[node_id]
    return FieldError(f"{ROOT}/nodes/{node.index}", f"{node_id} ({node.type}) {message}")


def expand(template: Graph, counts: Mapping[str, int | None]) -> Graph:
    """The run's graph of ``template`` when each ForEach has ``counts[F]`` items (None: not
    known yet — its region left out, its collectors waiting for it)."""
    template = template.batches.drawn or template
    batches = template.batches
    if not batches:
        return template
    nodes: dict[str, GraphNode] = {}
    inputs: dict[str, dict[str, list[str]]] = {}
    # The source outputs, parallel to ``inputs`` (an instance's are its drawn node's).
    ports: dict[str, dict[str, list[str]]] = {}
    order: list[str] = []
    out = Batches(
        regions=batches.regions,
        region_of=batches.region_of,
        collected_by=batches.collected_by,
        counts=dict(counts),
        drawn=template,
    )
    for node_id in template.order:
        if node_id in batches.region_of:
            continue
        node = template.nodes[node_id]
        for_each = batches.collected_by.get(node_id)
        drawn_ports = template.ports.get(node_id, {})
        if for_each is None:
            nodes[node_id] = node
            inputs[node_id] = {k: list(v) for k, v in template.inputs[node_id].items()}
            ports[node_id] = {k: list(v) for k, v in drawn_ports.items()}
        elif batches.regions[for_each].repeat:
            # The drawn Until takes the last iteration's Until instance (or, before the
            # first iteration, waits for the Repeat).
            count = counts.get(for_each)
            last = instance_id(node_id, count - 1) if count else for_each
            nodes[node_id] = node
            inputs[node_id] = {name: [last] for name in template.inputs[node_id]}
        else:
            count = counts.get(for_each)
            nodes[node_id] = node
            inputs[node_id] = {
                name: [for_each]
                if count is None
                else [_source(batches, for_each, s, k) for k in range(count) for s in sources]
                for name, sources in template.inputs[node_id].items()
            }
            if count is not None:
                ports[node_id] = {
                    name: [port for _ in range(count) for port in names]
                    for name, names in drawn_ports.items()
                }
        order.append(node_id)
        region = batches.regions.get(node_id)
        count = counts.get(node_id)
        if region is None or count is None:
            continue
        members = (*region.nodes, *region.collectors) if region.repeat else region.nodes
        for k in range(count):
            pick = instance_id(node_id, k)
            if region.repeat:
                until = instance_id(region.collectors[0], k - 1)
                nodes[pick] = GraphNode(
                    pick,
                    REPEAT_ITERATION.spec.type,
                    node.index,
                    REPEAT_ITERATION,
                    IterationParams(index=k),
                )
                inputs[pick] = {"text": [node_id if k == 0 else until]}
                if k:
                    ports[pick] = {"text": [EXHAUSTED]}
            else:
                nodes[pick] = GraphNode(
                    pick, FOR_EACH_ITEM.spec.type, node.index, FOR_EACH_ITEM, ItemParams(index=k)
                )
                inputs[pick] = {"list": [node_id]}
            out.instances[pick] = (node_id, k, count)
            order.append(pick)
            for member in members:
                drawn = template.nodes[member]
                one = instance_id(member, k)
                nodes[one] = GraphNode(one, drawn.type, drawn.index, drawn.node, drawn.params)
                inputs[one] = {
                    name: [_source(batches, node_id, s, k) for s in sources]
                    for name, sources in template.inputs[member].items()
                }
                ports[one] = template.ports.get(member, {})
                out.instances[one] = (member, k, count)
                order.append(one)
    downstream: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    for target, by_input in inputs.items():
        for sources in by_input.values():
            for source in sources:
                if target not in downstream[source]:
                    downstream[source].append(target)
    graph = Graph(
        nodes=nodes,
        inputs=inputs,
        downstream=downstream,
        order=order,
        ports={target: by_input for target, by_input in ports.items() if by_input},
    )
    graph.batches = out
    return graph


def _source(batches: Batches, for_each: str, source: str, k: int) -> str:
    """What feeds item k where the drawn graph has ``source``."""
    if source == for_each or batches.region_of.get(source) == for_each:
        return instance_id(source, k)
    return source


def count_at_submit(graph: Graph, run_input: Mapping[str, object] | None) -> dict[str, int]:
    """The item count of each ForEach fed straight by a TextInput, known before the run
    from its input data (the others are known when they run)."""
    found: dict[str, int] = {}
    for for_each, region in graph.batches.regions.items():
        if region.repeat:
            continue  # its iterations are known as they run
        sources = [s for srcs in graph.inputs[for_each].values() for s in srcs]
        if len(sources) != 1 or not isinstance(graph.nodes[sources[0]].node, TextInput):
            continue
        params = graph.nodes[sources[0]].params
        assert isinstance(params, TextInputParams)
        text = text_input_value(params, run_input)
        if text is None:
            continue
        node_params = graph.nodes[for_each].params
        assert isinstance(node_params, ForEachParams)
        try:
            found[for_each] = len(split_items(text, node_params.split))
        except NodeFailure:
            continue  # the ForEach fails when it runs, saying why
    return found
