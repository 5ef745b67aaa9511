"""Output-cache keys: a node's type, type version, fingerprint (its params as resolved with
the settings they read) and its inputs' content hashes (plus the run's input data for nodes
that read it). Equal keys mean equal outputs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from nodeloom.nodes.base import NodeSpec


def cache_key(
    spec: NodeSpec,
    fingerprint: Mapping[str, Any],
    input_hashes: Mapping[str, Sequence[str]],
    run_input: Mapping[str, Any] | None,
) -> str | None:
    """The key, or None when this node's output must never be reused."""
    if not spec.cacheable:
        return None
    material: dict[str, Any] = {
        "type": spec.type,
        "version": spec.version,
        "params": fingerprint,
        "inputs": {name: list(hashes) for name, hashes in sorted(input_hashes.items())},
    }
    if spec.uses_run_input:
        material["run_input"] = run_input or None
    encoded = orjson.dumps(material, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(encoded).hexdigest()
