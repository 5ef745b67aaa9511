"""Nodes that decide which way a run goes: ``If``, ``Switch`` and ``Merge``.

An If or a Switch passes its input text on unchanged, down the one output its condition
chose (``Produced.ports``); edges from the other outputs lead to nodes the run skips
(engine/branches.py). A Merge joins branches again: it runs once every edge into it has
settled, with what came down the ones taken.

A condition without a JMESPath ``path`` is a bounded pass over the input (text compares,
RE2 matches in linear time), so such nodes run on the event loop, within the step that
starts them; with a path the input is parsed as JSON, which is CPU work for a sandbox
process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field

from nodeloom.nodes import conditions
from nodeloom.nodes.conditions import Condition
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
    ParamProblem,
    Params,
    Produced,
    input_text,
)

TRUE, FALSE, DEFAULT = "true", "false", "default"
MAX_CASES = 32
CASE_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,39}$"
RESERVED = frozenset({DEFAULT, "error", "output"})


class IfParams(Params, Condition):
    """One condition; the input goes on down ``true`` or ``false``."""


class SwitchCase(Condition):
    name: str = Field(
        pattern=CASE_NAME,
        description="The case's output (what an edge's sourceHandle names): a letter, then "
        "letters, digits, - or _ (at most 40).",
    )


class SwitchParams(Params):
    cases: list[SwitchCase] = Field(
        default_factory=list,
        max_length=MAX_CASES,
        description="Tested in order: the input goes down the first case that holds, else "
        "down `default`.",
    )


class MergeParams(Params):
    mode: Literal["first", "all"] = Field(
        default="first",
        description="first: the first input (in edge order) whose branch ran; all: a JSON "
        "array of the texts of every one that ran, in edge order.",
    )


def _uses_path(items: Sequence[Condition]) -> bool:
    return any(item.path for item in items)


class If(InlineNode):
    spec = NodeSpec(
        type="If",
        version=1,
        category="flow",
        title="If",
        description="Test the input (text, number, regular expression, JSON path, empty) and "
        "pass it on down `true` or `false`; nodes on the other branch are skipped.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=IfParams,
        cost=Cost(credits=0),
        cacheable=False,  # which branch it took is not part of a stored output
        branches=(TRUE, FALSE),
    )

    def param_problems(self, params: IfParams) -> list[ParamProblem]:
        return conditions.problems(params)

    def runs_inline(self, params: IfParams) -> bool:
        return not params.path

    async def run(
        self, ctx: NodeContext, params: IfParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        # Its first output when the condition holds, else its second (an Until reuses it).
        holds, fails = self.spec.branches
        taken = holds if conditions.evaluate(params, text) else fails
        return Produced(data=text.encode("utf-8"), ports=(taken,))


class Switch(InlineNode):
    spec = NodeSpec(
        type="Switch",
        version=1,
        category="flow",
        title="Switch",
        description="Pass the input on down the first case whose condition holds (each case "
        "is an output named after it), else down `default`.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=SwitchParams,
        cost=Cost(credits=0),
        cacheable=False,
        branches=(DEFAULT,),
        branches_from_param="cases",
    )

    def output_names(self, params: SwitchParams) -> tuple[str, ...]:
        return (*(case.name for case in params.cases), DEFAULT)

    def param_problems(self, params: SwitchParams) -> list[ParamProblem]:
        found: list[ParamProblem] = []
        seen: set[str] = set()
        for i, case in enumerate(params.cases):
            if case.name in RESERVED:
                found.append(ParamProblem(("cases", i, "name"), f"{case.name!r} is reserved"))
            elif case.name in seen:
                found.append(ParamProblem(("cases", i, "name"), f"two cases named {case.name!r}"))
            seen.add(case.name)
            found.extend(conditions.problems(case, ("cases", i)))
        return found

    def runs_inline(self, params: SwitchParams) -> bool:
        return not _uses_path(params.cases)

    async def run(
        self, ctx: NodeContext, params: SwitchParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        taken = next(
            (case.name for case in params.cases if conditions.evaluate(case, text)), DEFAULT
        )
        return Produced(data=text.encode("utf-8"), ports=(taken,))


class Merge(InlineNode):
    flow_role = "merge"
    spec = NodeSpec(
        type="Merge",
        version=1,
        category="flow",
        title="Merge",
        description="Join branches: runs once each input's branch ran or was skipped, with "
        "the first that ran, or all of them as a JSON array; skipped when none ran.",
        inputs=(Input("inputs", Kind.TEXT, multiple=True),),
        output=Output(Kind.TEXT),
        params=MergeParams,
        cost=Cost(credits=0),
        cacheable=False,
        sandboxed=False,  # it picks or lists texts it was given: a pass over its inputs
    )

    async def run(
        self, ctx: NodeContext, params: MergeParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        value = inputs.get("inputs")
        refs = value if isinstance(value, list) else [value] if value is not None else []
        texts = [ref.read_text() for ref in refs if ref is not None]
        if params.mode == "first":
            return Produced.text(texts[0] if texts else "")
        return Produced.text(json.dumps(texts, ensure_ascii=False))


NODES: list[NodeType] = [If(), Switch(), Merge()]
