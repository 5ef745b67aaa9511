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
- ``Until`` tests its input with the condition an ``If`` has (nodes/conditions.py) and
  passes it on down ``done`` (it holds) or ``exhausted`` (it does not). Each iteration has
  its own instance (``U#k``), which tells the engine whether to run another iteration; the
  drawn Until runs once, after the last iteration, and routes the run on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from nodeloom.nodes import conditions
from nodeloom.nodes.base import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeSpec,
    NodeType,
    Output,
    ParamProblem,
    Params,
    Produced,
    input_text,
)
from nodeloom.nodes.conditions import Condition

DONE, EXHAUSTED = "done", "exhausted"


class RepeatParams(Params):
    max_iterations: int = Field(
        default=3,
        ge=1,
        description="Most times the region runs (at most the server's cap). The estimate "
        "holds credits for this many iterations; only those that ran are charged.",
    )


class Repeat(NodeType):
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

    def instant(self, params: Any) -> bool:
        return True

    def limit(self, params: RepeatParams, cap: int) -> int:
        return min(params.max_iterations, cap)

    async def run(
        self, ctx: NodeContext, params: RepeatParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        return Produced.text(input_text(inputs) or "")


class IterationParams(Params):
    index: int = Field(ge=0)


class RepeatIteration(NodeType):
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

    def instant(self, params: Any) -> bool:
        return True

    async def run(
        self, ctx: NodeContext, params: IterationParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        return Produced.text(input_text(inputs) or "")


class UntilParams(Params, Condition):
    """The condition that ends the loop (the forms an If tests)."""


class Until(NodeType):
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
        params=UntilParams,
        cost=Cost(credits=0),
        cacheable=False,  # which output it took is not part of a stored output
        branches=(DONE, EXHAUSTED),
    )

    def param_problems(self, params: UntilParams) -> list[ParamProblem]:
        return conditions.problems(params)

    def runs_inline(self, params: UntilParams) -> bool:
        return not params.path

    def instant(self, params: UntilParams) -> bool:
        return self.runs_inline(params)

    async def run(
        self, ctx: NodeContext, params: UntilParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        taken = DONE if conditions.evaluate(params, text) else EXHAUSTED
        return Produced(data=text.encode("utf-8"), ports=(taken,))


REPEAT_ITERATION = RepeatIteration()

NODES: list[NodeType] = [Repeat(), Until()]
