"""The ``Approval`` node: a person approves or rejects the value flowing through before the
run goes on (engine/approvals.py waits for the decision).

It passes its input on unchanged — or, for text where the node allows it, as the reviewer
edited it — down ``approved`` or ``rejected``; nodes on the other output are skipped, as
an If's are. The input's kind is the ``kind`` param: the node is *bound* to it when its
graph is checked (``bound``), so an image goes in and an image comes out. Like a
``Workflow`` node it is never executed in a sandbox: the engine records an approval and
waits on the event loop, holding no execution slot and no sandbox process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

from pydantic import Field

from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    ParamProblem,
    Params,
    Produced,
)

APPROVAL_TYPE = "Approval"
APPROVED, REJECTED = "approved", "rejected"
MAX_TIMEOUT_SECONDS = 30 * 24 * 3600


class ApprovalParams(Params):
    kind: Literal["text", "json", "image", "audio", "video"] = Field(
        default="text",
        description="What the reviewer judges (the input's kind, and the output's).",
    )
    prompt: str = Field(
        default="Approve to continue.",
        max_length=4000,
        description="Instructions shown to the reviewer.",
    )
    timeout_seconds: int = Field(
        default=86_400,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description="How long to wait for a decision before `timeout_outcome` is taken.",
    )
    timeout_outcome: Literal["approve", "reject"] = Field(
        default="reject", description="The decision taken when nobody decides in time."
    )
    allow_edit: bool = Field(
        default=False,
        description="May the reviewer edit the text before approving (text and json only)?",
    )


class Approval(NodeType):
    """Waits for a person's decision (API, signed link or the web app's inbox)."""

    spec = NodeSpec(
        type=APPROVAL_TYPE,
        version=1,
        category="flow",
        title="Approval",
        description="Pause this branch until a person approves or rejects the input "
        "(optionally editing text, with a comment); passes it on down `approved` or "
        "`rejected`. Times out to a chosen outcome. Costs nothing while it waits.",
        inputs=(Input("input", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=ApprovalParams,
        cost=Cost(credits=0),
        cacheable=False,  # a decision is a person's, never a stored output
        sandboxed=False,
        branches=(APPROVED, REJECTED),
    )

    def param_problems(self, params: ApprovalParams) -> list[ParamProblem]:
        if params.allow_edit and params.kind not in ("text", "json"):
            return [ParamProblem(("allow_edit",), "only text and json can be edited")]
        return []

    def bound(self, params: ApprovalParams) -> NodeType:
        kind = Kind(params.kind)
        if kind == Kind.TEXT:
            return self
        spec = replace(self.spec, inputs=(Input("input", kind),), output=Output(kind))
        node: NodeType = type(APPROVAL_TYPE, (Approval,), {"spec": spec})()
        return node

    async def run(
        self, ctx: NodeContext, params: ApprovalParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        # The engine waits for the decision (engine/approvals.py); nothing executes this.
        raise NodeFailure("an Approval node runs through the engine", "internal_error")


NODES: list[NodeType] = [Approval()]
