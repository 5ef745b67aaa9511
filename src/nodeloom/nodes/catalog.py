"""Every node type the service ships. Add a module's types here to publish them."""

from __future__ import annotations

from nodeloom.nodes import text
from nodeloom.nodes.base import NodeType


def all_nodes() -> list[NodeType]:
    return [*text.NODES]
