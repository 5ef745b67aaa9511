"""Sticky notes and groups: nodes of type ``Note`` and ``Group`` on the canvas, kept in the
graph but never run. Here, below every layer that needs them, so the store can count a
workflow's nodes without them."""

from __future__ import annotations

from typing import Any

NOTE_TYPE = "Note"
# A titled frame around the nodes whose ``parentId`` names it (React Flow's sub flows).
GROUP_TYPE = "Group"
CANVAS_ONLY = frozenset({NOTE_TYPE, GROUP_TYPE})


def node_count(graph_json: dict[str, Any]) -> int:
    """The nodes of a graph that are nodes for a run: all but its sticky notes and groups."""
    return sum(
        1
        for node in graph_json["nodes"]
        if not (isinstance(node, dict) and node.get("type") in CANVAS_ONLY)
    )
