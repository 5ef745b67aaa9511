"""``InlineNode``: the base of node types that finish at once whenever they run on the loop.

Such a node only routes, picks or copies what it was given (a condition without a path, an
item of a list, a value of the run's input data): nothing it does waits, so when it runs
inline (``runs_inline``) the in-process driver completes it within the step that starts it
(``instant``).
"""

from __future__ import annotations

from typing import Any

from nodeloom.sdk._node import NodeType


class InlineNode(NodeType):
    """A node that is ``instant`` exactly when it ``runs_inline``: by default always, as its
    spec is not sandboxed; a node whose params can call for a sandbox says when in
    ``runs_inline``."""

    def instant(self, params: Any) -> bool:
        return self.runs_inline(params)
