"""Outputs this process knows to be stored, by (account, cache key): what the output cache's
look-up last found or a run of this process last wrote (ADR 0029).

A run accepted with every output found here is recorded as cache hits without running its
nodes, and written in the one statement of a run that ends while accepted
(``transitions.created_alone``), whose run INSERT checks that each artifact named here is
still the account's newest for its key, the artifact the look-up would have found. Knowing
is never trusted: when that check fails the statement writes nothing, and the transaction
that follows looks the keys up as it always does (an output no longer stored at all: the
entries are forgotten and the run is accepted as if they had never been known, its nodes
executed). Only outputs whose bytes are in their row are kept (small text, ADR 0008):
whether an artifact store still holds a file is not a database check.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from nodeloom.engine.run_state import ArtifactInfo

# What the entries' bytes may add up to, and how many entries at most: the most recently
# used are kept.
BUDGET_BYTES = 8 * 1024 * 1024
MAX_ENTRIES = 8192


class KnownOutputs:
    def __init__(self, budget_bytes: int = BUDGET_BYTES, max_entries: int = MAX_ENTRIES) -> None:
        self._budget = budget_bytes
        self._max = max_entries
        self._bytes = 0
        self._items: OrderedDict[tuple[str, str], ArtifactInfo] = OrderedDict()

    def get(self, account_id: str, key: str) -> ArtifactInfo | None:
        found = self._items.get((account_id, key))
        if found is not None:
            self._items.move_to_end((account_id, key))
        return found

    def remember(self, account_id: str, key: str, artifact: ArtifactInfo) -> None:
        """``artifact`` holds the output of ``key``; an entry naming a newer artifact of the
        key (ids are time-ordered) is kept instead."""
        if artifact.data is None or len(artifact.data) > self._budget // 64:
            return
        entry = (account_id, key)
        known = self._items.get(entry)
        if known is not None:
            if known.id >= artifact.id:
                self._items.move_to_end(entry)
                return
            self._drop(entry)
        self._items[entry] = artifact
        self._bytes += len(artifact.data)
        while self._bytes > self._budget or len(self._items) > self._max:
            self._drop(next(iter(self._items)))

    def forget(self, account_id: str, keys: Iterable[str]) -> None:
        for key in keys:
            if (account_id, key) in self._items:
                self._drop((account_id, key))

    def __len__(self) -> int:
        return len(self._items)

    def _drop(self, entry: tuple[str, str]) -> None:
        gone = self._items.pop(entry)
        self._bytes -= len(gone.data or b"")
