"""The catalog of node types, checked when each type is registered."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from pydantic import BaseModel

from nodeloom.sdk._node import NodeType, Params

if TYPE_CHECKING:
    from nodeloom.nodes.packages import PackageInfo
    from nodeloom.settings import Settings

_TYPE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{1,63}$")
# A package's type: its namespace (the entry point's name), a dot, then a built-in-like name.
_PACKAGED_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}\.[A-Z][A-Za-z0-9]{1,63}$")


class Registry:
    def __init__(self) -> None:
        self._types: dict[str, NodeType] = {}
        # Every installed node package and what became of it (nodeloom.nodes.packages).
        self.packages: list[PackageInfo] = []

    def register(self, node: NodeType) -> None:
        spec = node.spec
        if not (_TYPE_NAME.match(spec.type) or _PACKAGED_TYPE_NAME.match(spec.type)):
            raise ValueError(f"bad node type name {spec.type!r}")
        if spec.type in self._types:
            raise ValueError(f"node type {spec.type} registered twice")
        names = [i.name for i in spec.inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"{spec.type}: duplicate input names")
        if not (isinstance(spec.params, type) and issubclass(spec.params, Params)):
            raise ValueError(f"{spec.type}: params must subclass nodes.base.Params")
        if spec.version < 1 or spec.cost.credits < 0 or spec.cost.per_second < 0:
            raise ValueError(f"{spec.type}: bad version or cost")
        self._types[spec.type] = node

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
        from nodeloom.nodes import packages

        found = packages.discover(settings)
        registry.packages = found.packages
        for packaged in found.nodes:
            registry.register(packaged)  # checked once already by discover
    return registry


def package_of(node: NodeType) -> PackageInfo | None:
    """The node package a type comes from; None for a built-in type."""
    from nodeloom.nodes.packages import PackagedNode

    return node.package if isinstance(node, PackagedNode) else None
