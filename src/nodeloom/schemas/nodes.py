"""The published node catalog (GET /node-types)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Kind = Literal["text", "image", "audio", "video", "json"]


class NodeInputOut(BaseModel):
    name: str
    kind: Kind
    required: bool
    multiple: bool


class NodeOutputOut(BaseModel):
    kind: Kind
    content_type: str


class NodePortOut(BaseModel):
    """One output of a node: every output but ``error`` carries the node's one artifact."""

    name: str = Field(description="What an edge's `sourceHandle` names.")
    kind: Kind
    content_type: str
    role: Literal["output", "branch", "error"] = Field(
        description="`output`: the node's only output; `branch`: one of several, of which a "
        "run takes some (edges from the others lead to skipped nodes); `error`: the node's "
        "error as JSON {code, message, node_id}, sent down its edges when the node fails "
        "(the run then goes on)."
    )


class NodeCostOut(BaseModel):
    credits: int
    per_second: int


class NodePackageOut(BaseModel):
    """The installed node package a type comes from (absent for built-in types)."""

    name: str
    version: str
    namespace: str


class NodeTypeOut(BaseModel):
    type: str
    version: int
    category: str
    title: str
    description: str
    inputs: list[NodeInputOut]
    output: NodeOutputOut
    outputs: list[NodePortOut] = Field(
        default_factory=list,
        description="Every output an edge may leave from, by name (`output` for a node with "
        "one, or its branches), and `error`.",
    )
    outputs_from_param: str | None = Field(
        default=None,
        description="A param whose entries add branches of their own, named by their `name` "
        "(a Switch's `cases`), before the ones listed.",
    )
    params_schema: dict[str, Any]
    cost: NodeCostOut
    available: bool
    status: Literal["available", "unavailable"]
    unavailable_reason: str | None
    package: NodePackageOut | None = None
    credential_kinds: list[str] = Field(
        default_factory=list,
        description="The kinds of account credential its `credential` param may name (see "
        "GET /credential-kinds); empty when it takes none.",
    )
