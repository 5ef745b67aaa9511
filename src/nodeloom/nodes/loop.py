"""Quality-gate loops: a ``Repeat`` node opens a region, an ``Until`` node closes it, and
the run executes the region's nodes again until the Until's condition holds on what they
produced, or ``max_iterations`` is reached (docs/repeat.md; the engine side is
engine/batches.py, the decision docs/adr/0028-repeat-regions.md).

Like ``ForEach`` and its collectors, ``Repeat`` and ``Until`` are ordinary node types to the
catalog, the editor and the sandbox; their ``batch_role`` makes the graph check them and the
engine expand them. What each node does:

- ``Repeat`` passes its input text on: it is what iteration 1 starts from.
- ``RepeatIteration`` (not in the catalog; the engine adds one per iteration, ``R#k``)
  passes on what iteration k starts from: the Repeat's output for the first, the value the
  previous iteration's Until tested for the others — so a judge's feedback reaches the next
  prompt.
- ``Until`` is an ``If`` (nodes/flow.py, its condition and its check at save) that
  passes its input on down ``done`` (it holds) or ``exhausted`` (it does not). Each iteration has
  its own instance (``U#k``), which tells the engine whether to run another iteration; the
  drawn Until runs once, after the last iteration, and routes the run on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from nodeloom.nodes.flow import If, IfParams
from nodeloom.nodes.inline import InlineNode
from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
    input_text,
)

DONE, EXHAUSTED = "done", "exhausted"


class RepeatParams(Params):
    max_iterations: int = Field(
        default=3,
        ge=1,
        description="Most times the region runs (at most the server's cap). The estimate "
        "holds credits for this many iterations; only those that ran are charged.",
    )


class _PassOn(InlineNode):
    """Outputs its input text as it is, at once on the event loop."""

    async def run(
        self, ctx: NodeContext, params: Any, inputs: Mapping[str, InputValue]
    ) -> Produced:
        return Produced.text(input_text(inputs) or "")


class Repeat(_PassOn):
    """Passes its input on; the engine then runs the nodes after it (up to the Until) once,
    and again while the Until's condition does not hold."""

    batch_role: ClassVar[str | None] = "repeat"
    spec = NodeSpec(
        type="Repeat",
        version=1,
        category="batch",
        title="Repeat",
        description="Run the nodes after this one, up to an Until node, again and again until "
        "the Until's condition holds or max_iterations is reached. Iteration 1 gets this "
        "node's input; every later one gets the value the previous iteration's Until tested "
        "(a judge's feedback, say). Every iteration's node runs appear in the run with their "
        "iteration index.",
        inputs=(Input("text", Kind.TEXT, required=False),),
        output=Output(Kind.TEXT),
        params=RepeatParams,
        cost=Cost(credits=0),
        cacheable=False,  # it opens the region: its completion adds the first iteration
        sandboxed=False,  # it passes a text on
    )


class IterationParams(Params):
    index: int = Field(ge=0)


class RepeatIteration(_PassOn):
    """What iteration ``index`` starts from (added by the engine, not in the catalog)."""

    spec = NodeSpec(
        type="RepeatIteration",
        version=1,
        category="batch",
        title="Iteration",
        description="What one iteration of a Repeat starts from.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=IterationParams,
        cost=Cost(credits=0),
        sandboxed=False,
    )


class Until(If):
    """An If whose outputs are ``done`` and ``exhausted``, that closes a Repeat region."""

    batch_role: ClassVar[str | None] = "until"
    spec = NodeSpec(
        type="Until",
        version=1,
        category="batch",
        title="Until",
        description="End a Repeat region: test what the iteration produced (text, number, "
        "regular expression, JSON path, empty, as an If does); the Repeat runs again while "
        "it does not hold. After the last iteration its value goes down `done` (the "
        "condition held) or `exhausted` (max_iterations reached without it).",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=IfParams,
        cost=Cost(credits=0),
        cacheable=False,  # which output it took is not part of a stored output
        branches=(DONE, EXHAUSTED),
    )


REPEAT_ITERATION = RepeatIteration()

NODES: list[NodeType] = [Repeat(), Until()]
