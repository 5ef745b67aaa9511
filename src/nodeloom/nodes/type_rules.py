"""The rules a node type meets to join a catalog: its name, its inputs, its params and its
cost. The registry checks them at registration and node packages before they are admitted
(nodes/packages.py), so both refuse a type for the same reasons."""

from __future__ import annotations

import re

from nodeloom.sdk._node import NodeType, Params

_TYPE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{1,63}$")
# A package's type: its namespace (the entry point's name), a dot, then a built-in-like name.
_PACKAGED_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}\.[A-Z][A-Za-z0-9]{1,63}$")


def check(node: NodeType) -> None:
    """Raises ValueError saying what is wrong with ``node``'s spec."""
    spec = node.spec
    if not (_TYPE_NAME.match(spec.type) or _PACKAGED_TYPE_NAME.match(spec.type)):
        raise ValueError(f"bad node type name {spec.type!r}")
    names = [i.name for i in spec.inputs]
    if len(set(names)) != len(names):
        raise ValueError(f"{spec.type}: duplicate input names")
    if not (isinstance(spec.params, type) and issubclass(spec.params, Params)):
        raise ValueError(f"{spec.type}: params must subclass nodes.base.Params")
    if spec.version < 1 or spec.cost.credits < 0 or spec.cost.per_second < 0:
        raise ValueError(f"{spec.type}: bad version or cost")


def registered_twice(type_name: str) -> str:
    return f"node type {type_name} registered twice"
