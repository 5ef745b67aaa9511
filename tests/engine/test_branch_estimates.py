"""The estimate of a graph with branches (engine/branches.py, pure): the most expensive way
through it, never less than what any run of it can be charged."""

from __future__ import annotations

from typing import Any

import pytest

from nodeloom.engine.graph import Graph
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.nodes.registry import build_registry
from nodeloom.settings import Settings
from tests.runs_helpers import g, n


def edge(
    source: str, target: str, out: str | None = None, into: str | None = None
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": f"{source}.{out}->{target}.{into}",
        "source": source,
        "target": target,
    }
    if out:
        found["sourceHandle"] = out
    if into:
        found["targetHandle"] = into
    return found


def paid(node_id: str) -> dict[str, Any]:
    """A node of 1 credit."""
    return n(node_id, "TextTemplate", template=f"{node_id} {{{{ text }}}}")


def checked(graph: dict[str, Any], settings: Settings) -> Graph:
    found = validate_graph(graph, build_registry(), settings)
    assert not isinstance(found, list), found
    return found


def test_only_the_dearest_branch_is_held(settings: Settings) -> None:
    graph = g(
        [n("in", "TextInput"), n("if", "If"), paid("a"), paid("b1"), paid("b2"), paid("after")],
        [
            edge("in", "if"),
            edge("if", "a", "true"),
            edge("if", "b1", "false"),
            edge("b1", "b2"),
            edge("in", "after"),
        ],
    )
    assert checked(graph, settings).estimate_credits() == 2 + 1


def test_nested_branches_are_counted_from_the_inside(settings: Settings) -> None:
    # if1 true: a, then if2 (true: x; false: y1 -> y2); if1 false: b.
    graph = g(
        [
            n("in", "TextInput"),
            n("if1", "If"),
            paid("a"),
            n("if2", "If"),
            paid("x"),
            paid("y1"),
            paid("y2"),
            paid("b"),
        ],
        [
            edge("in", "if1"),
            edge("if1", "a", "true"),
            edge("a", "if2"),
            edge("if2", "x", "true"),
            edge("if2", "y1", "false"),
            edge("y1", "y2"),
            edge("if1", "b", "false"),
        ],
    )
    # The dearest way: a, then y1 and y2.
    assert checked(graph, settings).estimate_credits() == 3


def test_a_node_fed_by_both_branches_never_runs_and_is_not_held(settings: Settings) -> None:
    graph = g(
        [n("in", "TextInput"), n("if", "If"), paid("a"), paid("b"), n("both", "TextJoin")],
        [
            edge("in", "if"),
            edge("if", "a", "true"),
            edge("if", "b", "false"),
            edge("if", "both", "true", "texts"),
            edge("if", "both", "false", "texts"),
        ],
    )
    assert checked(graph, settings).estimate_credits() == 1


def test_a_merge_after_branches_is_held_once(settings: Settings) -> None:
    graph = g(
        [n("in", "TextInput"), n("if", "If"), paid("a"), paid("b"), n("m", "Merge"), paid("end")],
        [
            edge("in", "if"),
            edge("if", "a", "true"),
            edge("if", "b", "false"),
            edge("a", "m"),
            edge("b", "m"),
            edge("m", "end"),
        ],
    )
    assert checked(graph, settings).estimate_credits() == 2


@pytest.mark.parametrize(("handler", "expected"), [(1, 2), (3, 3)])
def test_an_error_edge_holds_the_dearer_of_success_and_failure(
    settings: Settings, handler: int, expected: int
) -> None:
    """risky (1) -> ok (1); risky's error -> a chain of ``handler`` paid nodes. A failed
    node is not charged, so failing costs the handler alone."""
    nodes = [n("in", "TextInput"), paid("risky"), paid("ok")]
    edges = [edge("in", "risky"), edge("risky", "ok")]
    previous, out = "risky", "error"
    for i in range(handler):
        nodes.append(paid(f"h{i}"))
        edges.append(edge(previous, f"h{i}", out))
        previous, out = f"h{i}", None
    assert checked(g(nodes, edges), settings).estimate_credits() == expected


def test_a_switch_holds_its_dearest_case(settings: Settings) -> None:
    cases = [{"name": f"c{i}", "operator": "contains", "value": str(i)} for i in range(3)]
    nodes = [n("in", "TextInput"), n("sw", "Switch", cases=cases)]
    edges = [edge("in", "sw")]
    for port, count in {"c0": 1, "c1": 3, "c2": 2, "default": 0}.items():
        previous, out = "sw", port
        for i in range(count):
            nodes.append(paid(f"{port}_{i}"))
            edges.append(edge(previous, f"{port}_{i}", out))
            previous, out = f"{port}_{i}", None
    assert checked(g(nodes, edges), settings).estimate_credits() == 3
