"""Output-cache keys: a node's type, type version, fingerprint (its params as resolved with
the settings they read) and its inputs' content hashes (plus, for nodes that read the run's
input data, the part of it they read: ``NodeType.run_input_read``). Equal keys mean equal
outputs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from nodeloom.sdk._node import NodeSpec


def cache_key(
    spec: NodeSpec,
    fingerprint: Mapping[str, Any],
    input_hashes: Mapping[str, Sequence[str]],
    input_read: Any,
) -> str | None:
    """The key, or None when this node's output must never be reused. ``input_read``: what
    the node reads of the run's input data (only nodes with ``uses_run_input`` read any)."""
    if not spec.cacheable:
        return None
    material: dict[str, Any] = {
        "type": spec.type,
        "version": spec.version,
        "params": fingerprint,
        "inputs": {name: list(hashes) for name, hashes in sorted(input_hashes.items())},
    }
    if spec.uses_run_input:
        material["run_input"] = input_read
    encoded = orjson.dumps(material, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(encoded).hexdigest()
