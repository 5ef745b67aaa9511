"""Sticky notes: nodes of type ``Note`` on the canvas, kept in the graph but never run. Here,
below every layer that needs it, so the store can count a workflow's nodes without them."""

from __future__ import annotations

from typing import Any

NOTE_TYPE = "Note"


def node_count(graph_json: dict[str, Any]) -> int:
    """The nodes of a graph that are nodes for a run: all but its sticky notes."""
    return sum(
        1
        for node in graph_json["nodes"]
        if not (isinstance(node, dict) and node.get("type") == NOTE_TYPE)
    )
