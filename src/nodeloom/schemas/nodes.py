"""The published node catalog (GET /node-types)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Kind = Literal["text", "image", "audio", "video"]


class NodeInputOut(BaseModel):
    name: str
    kind: Kind
    required: bool
    multiple: bool


class NodeOutputOut(BaseModel):
    kind: Kind
    content_type: str


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
