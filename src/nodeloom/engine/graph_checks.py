"""Checking a React Flow graph against the node catalog: every problem at once, each at a
JSON Pointer; a graph without problems becomes a ``Graph`` (engine/graph.py) with what the
executor needs (inputs per node in edge order, downstream sets, a topological order).

No database or HTTP here: the same input always gives the same answer.
"""

from __future__ import annotations

import unicodedata
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from nodeloom.engine.batches import find_regions
from nodeloom.engine.graph import Graph, GraphNode
from nodeloom.errors import FieldError
from nodeloom.nodes.registry import Registry
from nodeloom.nodes.subworkflow import WORKFLOW_TYPE, ChildInterface, bind
from nodeloom.notes import GROUP_TYPE, NOTE_TYPE
from nodeloom.sdk._node import (
    DEFAULT_OUTPUT,
    ERROR_OUTPUT,
    Kind,
    NodeType,
    ParamProblem,
    Params,
    accepts,
)
from nodeloom.settings import Settings

# A Workflow node's child, resolved beforehand (engine/subworkflows.py): its interface, or
# why it cannot be used (a problem reported at the node's ``data/workflow_id``).
Children = Mapping[str, ChildInterface | str]

MAX_EDGES = 2000
OUTPUT_HANDLE = "output"
ROOT = "/graph_json"


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Problems:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, pointer: str, message: str) -> None:
        self.items.append(FieldError(pointer, message))

    def objects(
        self, items: list[Any], where: str, what: str, shape: str
    ) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The index, pointer and value of each of ``items`` (the graph's ``where`` list)
        that is a JSON object; each other one is a problem: ``what`` must be an object
        ``shape``."""
        for index, raw in enumerate(items):
            at = f"{ROOT}/{where}/{index}"
            if isinstance(raw, dict):
                yield index, at, raw
            else:
                self.add(at, f"{what} must be an object {shape}")


def validate_graph(
    graph_json: Any, registry: Registry, settings: Settings, children: Children | None = None
) -> Graph | list[FieldError]:
    """The checked graph, or every problem found (never raises for any JSON value).
    ``children``: the interfaces of the workflows its ``Workflow`` nodes name, by id
    (engine/subworkflows.py resolves them); a node naming one not there is a problem."""
    problems = _Problems()
    if not isinstance(graph_json, dict):
        problems.add(ROOT, "graph_json must be an object with nodes, edges and viewport")
        return problems.items
    raw_nodes = graph_json.get("nodes")
    raw_edges = graph_json.get("edges")
    _check_viewport(graph_json, problems)
    if not isinstance(raw_nodes, list):
        problems.add(f"{ROOT}/nodes", "nodes is required and must be an array")
    if not isinstance(raw_edges, list):
        problems.add(f"{ROOT}/edges", "edges is required and must be an array")
    if not isinstance(raw_nodes, list) or not isinstance(raw_edges, list):
        return problems.items
    max_nodes = settings.max_graph_nodes
    if len(raw_nodes) > max_nodes:
        problems.add(f"{ROOT}/nodes", f"a graph has at most {max_nodes} nodes")
    if len(raw_edges) > MAX_EDGES:
        problems.add(f"{ROOT}/edges", f"a graph has at most {MAX_EDGES} edges")
    if problems.items:
        return problems.items

    notes: dict[str, str] = {}
    nodes = _check_nodes(raw_nodes, registry, settings, problems, children or {}, notes)
    _check_parents(raw_nodes, notes, problems)
    inputs, ports = _check_edges(raw_edges, nodes, problems, notes)
    _check_required_inputs(nodes, inputs, problems)
    graph = Graph(
        nodes={n.id: n for n in nodes.values() if n is not None},
        inputs=inputs,
        downstream={node_id: [] for node_id in nodes},
        ports={target: by_input for target, by_input in ports.items() if by_input},
    )
    for target, by_input in inputs.items():
        for sources in by_input.values():
            for source in sources:
                if target not in graph.downstream[source]:
                    graph.downstream[source].append(target)
    order = topological_order(list(nodes), graph.downstream)
    if len(order) < len(nodes):
        cycle = find_cycle([n for n in nodes if n not in set(order)], graph.downstream)
        index = next(
            i
            for i, raw in enumerate(raw_nodes)
            if isinstance(raw, dict) and raw.get("id") == cycle[0]
        )
        problems.add(
            f"{ROOT}/nodes/{index}",
            "the graph has a cycle through nodes " + " -> ".join([*cycle, cycle[0]]),
        )
    graph.order = order
    if problems.items:
        return problems.items
    problems.items.extend(
        find_regions(graph, settings.batch_max_items, settings.repeat_max_iterations)
    )
    if problems.items:
        return problems.items
    return graph


@dataclass(frozen=True)
class DeepCheck:
    """A node whose params need a check too expensive for the event loop (see
    ``NodeType.deep_problems``); run in a sandbox process."""

    pointer: str
    type: str
    params: dict[str, Any]


def deep_checks(graph_json: Any, registry: Registry, *, max_nodes: int) -> list[DeepCheck]:
    """The nodes of ``graph_json`` (checked or not) whose type has deep checks, whose params
    are otherwise valid and need them, among its first ``max_nodes`` (the configured
    ``Settings.max_graph_nodes``: a larger graph is refused anyway, and the sandbox is not
    made to check what will be refused)."""
    if not isinstance(graph_json, dict) or not isinstance(graph_json.get("nodes"), list):
        return []
    found: list[DeepCheck] = []
    for index, raw in enumerate(graph_json["nodes"][:max_nodes]):
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            continue
        node = registry.get(raw["type"])
        if node is None or type(node).deep_problems is NodeType.deep_problems:
            continue
        data = raw.get("data") or {}
        if not isinstance(data, dict):
            continue
        try:
            params = node.spec.params.model_validate(data)
        except ValidationError:
            continue
        if not node.needs_deep_check(params):
            continue
        found.append(
            DeepCheck(f"{ROOT}/nodes/{index}/data", node.spec.type, params.model_dump(mode="json"))
        )
    return found


def unavailable_nodes(graph_json: Any, registry: Registry, settings: Settings) -> list[FieldError]:
    """The nodes of ``graph_json`` whose type cannot run with these settings (a provider node
    while no provider is configured). Not a flaw of the graph: it is saved with these as
    warnings, and refused at execute while they last."""
    if not isinstance(graph_json, dict) or not isinstance(graph_json.get("nodes"), list):
        return []
    found: list[FieldError] = []
    for index, raw in enumerate(graph_json["nodes"]):
        type_name = raw.get("type") if isinstance(raw, dict) else None
        node = registry.get(type_name) if isinstance(type_name, str) else None
        if node is None and isinstance(type_name, str) and "." in type_name:
            found.append(FieldError(f"{ROOT}/nodes/{index}/type", _unknown_type(type_name)))
            continue
        reason = node.unavailable_reason(settings) if node is not None else None
        if reason and node is not None and _own_provider(node, raw):
            reason = None
        if reason:
            found.append(
                FieldError(f"{ROOT}/nodes/{index}/type", f"{type_name} is unavailable: {reason}")
            )
    return found


def _unknown_type(type_name: object) -> str:
    """A type of a node package (``acme.Watermark``) that is not loaded is not a mistake of
    the graph: the package may come back, and the node's params are kept as they are."""
    if isinstance(type_name, str) and "." in type_name:
        namespace = type_name.partition(".")[0]
        return (
            f"unknown node type {type_name!r}: the node package of namespace {namespace!r} is "
            "not installed or not loaded (see `nodeloom nodes list`)"
        )
    return f"unknown node type {type_name!r}; see GET /api/v1/node-types"


def _own_provider(node: NodeType, raw: dict[str, Any]) -> bool:
    """Whether the node names an account's credential (its own provider endpoint), so the
    operator's provider is not needed (the credential itself is checked where the database
    is at hand)."""
    data = raw.get("data")
    return (
        isinstance(data, dict)
        and bool(data.get("credential"))
        and "credential" in node.spec.params.model_fields
    )


def _check_viewport(graph_json: dict[str, Any], problems: _Problems) -> None:
    viewport = graph_json.get("viewport")
    if not isinstance(viewport, dict):
        problems.add(f"{ROOT}/viewport", "viewport is required and must be an object {x, y, zoom}")
        return
    for key in ("x", "y", "zoom"):
        if not _is_number(viewport.get(key)):
            problems.add(f"{ROOT}/viewport/{key}", f"viewport.{key} must be a number")


def _check_nodes(
    raw_nodes: list[Any],
    registry: Registry,
    settings: Settings,
    problems: _Problems,
    children: Children,
    notes: dict[str, str],
) -> dict[str, GraphNode | None]:
    """Node id -> checked node (None when the node itself is invalid but has a usable id).
    Sticky notes (``NOTE_TYPE``) and groups (``GROUP_TYPE``) are checked but left out: their
    ids go to ``notes`` (id -> "note" or "group")."""
    nodes: dict[str, GraphNode | None] = {}
    for index, at, raw in problems.objects(
        raw_nodes, "nodes", "a node", "{id, type, position, data}"
    ):
        node_id = raw.get("id")
        if not isinstance(node_id, str) or not node_id or len(node_id) > 200:
            problems.add(f"{at}/id", "id must be a non-empty string of at most 200 characters")
            node_id = None
        elif node_id in nodes or node_id in notes:
            problems.add(f"{at}/id", f"duplicate node id {node_id!r}")
            node_id = None
        position = raw.get("position")
        if position is not None and not (
            isinstance(position, dict)
            and _is_number(position.get("x"))
            and _is_number(position.get("y"))
        ):
            problems.add(f"{at}/position", "position must be an object {x, y} of numbers")
        _check_label(raw.get("data"), at, problems)
        if raw.get("type") == NOTE_TYPE:
            _check_note(raw.get("data"), at, problems)
            if node_id is not None:
                notes[node_id] = "note"
            continue
        if raw.get("type") == GROUP_TYPE:
            if raw.get("data") is not None and not isinstance(raw.get("data"), dict):
                problems.add(f"{at}/data", "data must be an object {label}")
            if node_id is not None:
                notes[node_id] = "group"
            continue
        checked = _check_node_type(raw, index, registry, settings, problems)
        if checked is not None:
            checked = checked[0].bound(checked[1]), checked[1]
        if checked is not None and checked[0].spec.type == WORKFLOW_TYPE:
            checked = _bind_child(checked, children, f"{at}/data/workflow_id", problems)
        if node_id is not None:
            nodes[node_id] = (
                GraphNode(node_id, checked[0].spec.type, index, checked[0], checked[1])
                if checked
                else None
            )
    return nodes


LABEL_MAX = 80  # characters of a node's name (``data.label``)
# A sticky note on the canvas (NOTE_TYPE): kept in the graph, never run, estimated or
# connected.
NOTE_TEXT_MAX = 10_000
# A group (GROUP_TYPE) on the canvas: a titled frame (its title is ``data.label``) around the
# nodes whose ``parentId`` names it (React Flow's sub flows); like a note, never run or
# connected.


def _check_parents(raw_nodes: list[Any], notes: dict[str, str], problems: _Problems) -> None:
    """A node's ``parentId``, when present, names a group of the graph (groups do not nest)."""
    for index, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict) or raw.get("parentId") is None:
            continue
        at = f"{ROOT}/nodes/{index}/parentId"
        parent = raw["parentId"]
        if raw.get("type") == GROUP_TYPE:
            problems.add(at, "a group cannot be inside another group")
        elif not isinstance(parent, str) or notes.get(parent) != "group":
            problems.add(at, f"parentId {parent!r} is not a group of this graph")


def _check_note(data: Any, at: str, problems: _Problems) -> None:
    """A note's ``data``: its ``text`` (a string of at most NOTE_TEXT_MAX characters), and
    any field of the editor's beside it."""
    if data is None:
        return
    if not isinstance(data, dict):
        problems.add(f"{at}/data", "data must be an object {text}")
        return
    text = data.get("text", "")
    if not isinstance(text, str) or len(text) > NOTE_TEXT_MAX:
        problems.add(
            f"{at}/data/text", f"a note's text is a string of at most {NOTE_TEXT_MAX} characters"
        )


def _check_label(data: Any, at: str, problems: _Problems) -> None:
    """A node's name, React Flow's ``data.label`` (kept beside the params, not one of them):
    when present, 1 to LABEL_MAX characters on one line, no control characters, not blank."""
    if not isinstance(data, dict) or "label" not in data:
        return
    label = data["label"]
    if not isinstance(label, str):
        problems.add(f"{at}/data/label", "label must be a string (the node's name)")
    elif not label.strip() or len(label) > LABEL_MAX:
        problems.add(f"{at}/data/label", f"label must be 1 to {LABEL_MAX} characters, not blank")
    elif any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in label):
        problems.add(
            f"{at}/data/label", "label must be one line without control or format characters"
        )


def _check_node_type(
    raw: dict[str, Any], index: int, registry: Registry, settings: Settings, problems: _Problems
) -> tuple[NodeType, Params] | None:
    at = f"{ROOT}/nodes/{index}"
    type_name = raw.get("type")
    node = registry.get(type_name) if isinstance(type_name, str) else None
    if node is None:
        problems.add(f"{at}/type", _unknown_type(type_name))
        return None
    data = raw.get("data", {})
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.add(f"{at}/data", "data must be an object of params")
        return None
    try:
        params = node.spec.params.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = "/".join(_escape(str(part)) for part in err["loc"])
            problems.add(f"{at}/data/{loc}" if loc else f"{at}/data", err["msg"])
        return None
    for problem in node.param_problems(params):
        if isinstance(problem, ParamProblem):
            tokens = "/".join(_escape(str(token)) for token in problem.path)
            problems.add(f"{at}/data/{tokens}", problem.message)
        else:
            problems.add(f"{at}/data", problem)
    return node, params


def _bind_child(
    checked: tuple[NodeType, Params], children: Children, at: str, problems: _Problems
) -> tuple[NodeType, Params] | None:
    """A Workflow node bound to its child's interface; None (a problem) when the child is
    not the account's, makes a cycle or cannot be used."""
    workflow_id = checked[1].workflow_id  # type: ignore[attr-defined]
    child = children.get(workflow_id)
    if child is None:
        problems.add(at, f"no workflow {workflow_id!r} in this account")
        return None
    if isinstance(child, str):
        problems.add(at, child)
        return None
    return bind(child), checked[1]


def _check_edges(
    raw_edges: list[Any],
    nodes: dict[str, GraphNode | None],
    problems: _Problems,
    notes: dict[str, str],
) -> tuple[dict[str, dict[str, list[str]]], dict[str, dict[str, list[str]]]]:
    """Each node's inputs (input name -> source nodes, in edge order) and the source output
    each of those comes from."""
    inputs: dict[str, dict[str, list[str]]] = {node_id: {} for node_id in nodes}
    ports: dict[str, dict[str, list[str]]] = {node_id: {} for node_id in nodes}
    edge_ids: set[str] = set()
    for _, at, raw in problems.objects(raw_edges, "edges", "an edge", "{id, source, target}"):
        edge_id = raw.get("id")
        if not isinstance(edge_id, str) or not edge_id:
            problems.add(f"{at}/id", "id must be a non-empty string")
        elif edge_id in edge_ids:
            problems.add(f"{at}/id", f"duplicate edge id {edge_id!r}")
        else:
            edge_ids.add(edge_id)
        source, target = raw.get("source"), raw.get("target")
        ok = True
        for key, value in (("source", source), ("target", target)):
            if isinstance(value, str) and value in notes:
                kind = notes[value]
                problems.add(f"{at}/{key}", f"{value!r} is a {kind}: {kind}s cannot be connected")
                ok = False
            elif not isinstance(value, str) or value not in nodes:
                problems.add(f"{at}/{key}", f"{key} {value!r} is not a node of this graph")
                ok = False
        if not ok:
            continue
        assert isinstance(source, str) and isinstance(target, str)
        if source == target:
            problems.add(at, f"the graph has a cycle through nodes {source} -> {source}")
            continue
        src, dst = nodes[source], nodes[target]
        if dst is None:
            continue  # the node's own problem is already reported
        if src is None:
            # The source is invalid (reported already); still count the edge as connecting
            # its input, so the target is not also blamed for a missing input.
            handle = raw.get("targetHandle")
            name = handle if isinstance(handle, str) else None
            if name is None and len(dst.node.spec.inputs) == 1:
                name = dst.node.spec.inputs[0].name
            if name is not None and dst.node.spec.input(name) is not None:
                inputs[target].setdefault(name, []).append(source)
                ports[target].setdefault(name, []).append(DEFAULT_OUTPUT)
            continue
        port = _source_output(raw.get("sourceHandle"), src, at, problems)
        if port is None:
            continue
        target_input = _target_input(raw.get("targetHandle"), dst, at, problems)
        if target_input is None:
            continue
        spec_input = dst.node.spec.input(target_input)
        assert spec_input is not None
        kind = Kind.JSON if port == ERROR_OUTPUT else src.node.spec.output.kind
        if not accepts(spec_input.kind, kind):
            problems.add(
                f"{at}/target",
                f"kind mismatch: {source} ({src.type}) outputs {kind} on {port!r}, "
                f"input {target_input!r} of {target} ({dst.type}) takes {spec_input.kind}",
            )
            continue
        sources = inputs[target].setdefault(target_input, [])
        if sources and not spec_input.multiple:
            problems.add(
                f"{at}/target",
                f"input {target_input!r} of {target} takes one edge; it already has one",
            )
            continue
        sources.append(source)
        ports[target].setdefault(target_input, []).append(port)
    return inputs, ports


def _source_output(handle: Any, src: GraphNode, at: str, problems: _Problems) -> str | None:
    """The output of ``src`` an edge leaves from (its ``sourceHandle``): ``error``, one of
    its branches, or — for a node without branches — ``output`` (also by its kind's name,
    as saved before nodes had several outputs, or left out)."""
    names = src.node.output_names(src.params)
    branches = names != (DEFAULT_OUTPUT,)
    if handle == ERROR_OUTPUT:
        return ERROR_OUTPUT
    if not branches and handle in (None, DEFAULT_OUTPUT, src.node.spec.output.kind.value):
        return DEFAULT_OUTPUT
    if isinstance(handle, str) and handle in names:
        return handle
    listed = ", ".join(repr(name) for name in (*names, ERROR_OUTPUT))
    if handle is None:
        problems.add(f"{at}/sourceHandle", f"{src.type} has several outputs ({listed}): name one")
    else:
        problems.add(
            f"{at}/sourceHandle",
            f"unknown handle {handle!r}: the outputs of {src.type} are {listed}",
        )
    return None


def _target_input(handle: Any, dst: GraphNode, at: str, problems: _Problems) -> str | None:
    spec_inputs = dst.node.spec.inputs
    if handle is None:
        if len(spec_inputs) == 1:
            return spec_inputs[0].name
        if not spec_inputs:
            problems.add(f"{at}/target", f"{dst.id} ({dst.type}) takes no inputs")
        else:
            names = ", ".join(i.name for i in spec_inputs)
            problems.add(f"{at}/targetHandle", f"{dst.type} has several inputs ({names}): name one")
        return None
    if not isinstance(handle, str) or dst.node.spec.input(handle) is None:
        names = ", ".join(i.name for i in spec_inputs) or "none"
        problems.add(f"{at}/targetHandle", f"{dst.type} has no input {handle!r} (inputs: {names})")
        return None
    return handle


def _check_required_inputs(
    nodes: dict[str, GraphNode | None],
    inputs: dict[str, dict[str, list[str]]],
    problems: _Problems,
) -> None:
    for node_id, node in nodes.items():
        if node is None:
            continue
        for spec_input in node.node.spec.inputs:
            if spec_input.required and not inputs[node_id].get(spec_input.name):
                problems.add(
                    f"{ROOT}/nodes/{node.index}",
                    f"required input {spec_input.name!r} of {node_id} ({node.type}) "
                    "is not connected",
                )


def topological_order(node_ids: list[str], downstream: dict[str, list[str]]) -> list[str]:
    """Kahn's algorithm, stable in the nodes' declared order. Nodes on a cycle are left out."""
    indegree = dict.fromkeys(node_ids, 0)
    for targets in downstream.values():
        for target in targets:
            indegree[target] += 1
    queue = deque(n for n in node_ids if indegree[n] == 0)
    order: list[str] = []
    while queue:
        current = queue.popleft()
        order.append(current)
        for target in downstream[current]:
            indegree[target] -= 1
            if indegree[target] == 0:
                queue.append(target)
    return order


def find_cycle(candidates: list[str], downstream: dict[str, list[str]]) -> list[str]:
    """One cycle among ``candidates`` (the nodes Kahn's algorithm could not order), in edge
    order. Every leftover node has a predecessor among the leftovers, so walking backwards
    must eventually revisit a node; the walk between the two visits is a cycle."""
    allowed = set(candidates)
    predecessor: dict[str, str] = {}
    for source, targets in downstream.items():
        if source in allowed:
            for target in targets:
                if target in allowed:
                    predecessor.setdefault(target, source)
    seen: dict[str, int] = {}
    walk: list[str] = []
    current = candidates[0]
    while current not in seen:
        seen[current] = len(walk)
        walk.append(current)
        current = predecessor[current]
    cycle = walk[seen[current] :]
    cycle.reverse()
    return cycle
