"""The length of the media a node's price follows, known before its run.

A node priced per second of an input (``NodeType.length_input``: a transcription by the
audio it reads) holds, by default, the bound its params give (``max_seconds``). When that
input comes straight from an ``ImageInput``, ``AudioInput`` or ``VideoInput`` whose file
the run's input data (or the node's default asset) names, the file's measured length is
known at acceptance and bounds the hold instead; the charge is bounded by the length of
the input the execution read, the same file, so it never exceeds the hold.

Lengths further down the graph (the output of a node in between) are not followed: those
nodes hold their params' bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.engine.graph import GraphNode
from nodeloom.nodes.media_inputs import MediaInputParams, chosen_reference
from nodeloom.sdk._node import NodeFailure
from nodeloom.store import assets as asset_store


def lengths(
    conn: Connection,
    account_id: str,
    fed: Mapping[str, GraphNode],
    run_input: Mapping[str, Any] | None,
) -> dict[str, int]:
    """Node id -> the length in ms of the file its media input will output, where the
    file is the account's and has a length."""
    found: dict[str, int] = {}
    for node_id, source in fed.items():
        if not isinstance(source.params, MediaInputParams):
            continue
        try:
            reference = chosen_reference(source.params, run_input)
        except NodeFailure:
            continue  # the input node will fail; hold the bound
        if not reference:
            continue
        row = asset_store.media_of(conn, account_id, reference)
        if row is not None and row.duration_ms is not None:
            found[node_id] = int(row.duration_ms)
    return found
