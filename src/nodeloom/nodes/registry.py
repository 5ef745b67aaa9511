"""The catalog of node types, checked when each type is registered."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pydantic import BaseModel

from nodeloom.nodes import packages, type_rules
from nodeloom.nodes.packages import PackagedNode, PackageInfo
from nodeloom.sdk._node import NodeType
from nodeloom.settings import Settings


class Registry:
    def __init__(self) -> None:
        self._types: dict[str, NodeType] = {}
        # Every installed node package and what became of it (nodeloom.nodes.packages).
        self.packages: list[PackageInfo] = []

    def register(self, node: NodeType) -> None:
        type_rules.check(node)
        if node.spec.type in self._types:
            raise ValueError(type_rules.registered_twice(node.spec.type))
        self._types[node.spec.type] = node

    def get(self, type_name: str) -> NodeType | None:
        return self._types.get(type_name)

    def __contains__(self, type_name: object) -> bool:
        return type_name in self._types

    def __iter__(self) -> Iterator[NodeType]:
        return iter(sorted(self._types.values(), key=lambda n: (n.spec.category, n.spec.type)))

    def __len__(self) -> int:
        return len(self._types)


def params_schema(model: type[BaseModel]) -> dict[str, object]:
    return model.model_json_schema()


def build_registry(
    nodes: Iterable[NodeType] | None = None, settings: Settings | None = None
) -> Registry:
    """The built-in catalog, or a registry of exactly ``nodes`` (tests); with ``settings``,
    plus the installed node packages they admit (see nodes/packages.py)."""
    registry = Registry()
    if nodes is None:
        from nodeloom.nodes import catalog

        nodes = catalog.all_nodes()
    for node in nodes:
        registry.register(node)
    if settings is not None:
        found = packages.discover(settings)
        registry.packages = found.packages
        for packaged in found.nodes:
            registry.register(packaged)  # checked once already by discover
    return registry


def package_of(node: NodeType) -> PackageInfo | None:
    """The node package a type comes from; None for a built-in type."""
    return node.package if isinstance(node, PackagedNode) else None
