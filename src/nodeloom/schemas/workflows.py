"""Workflow bodies. Create and update are parsed by hand (see routes/workflows.py) so every
problem, missing fields included, is reported together as ``invalid_graph``; these models
document the shapes in OpenAPI and type the responses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.engine.states import RunStatus
from nodeloom.schemas.common import Timestamp


class Viewport(BaseModel):
    x: float
    y: float
    zoom: float


class GraphJson(BaseModel):
    model_config = ConfigDict(extra="allow")

    nodes: list[dict[str, Any]] = Field(
        description="React Flow nodes: {id, type, position: {x, y}, data: {...params}}"
    )
    edges: list[dict[str, Any]] = Field(
        description="React Flow edges: {id, source, target, sourceHandle?, targetHandle?}"
    )
    viewport: Viewport


class WorkflowCreate(BaseModel):
    name: str = Field(min_length=1, max_length=500)
    graph_json: GraphJson


class WorkflowUpdate(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=500)
    graph_json: GraphJson | None = None


class WorkflowSummary(BaseModel):
    id: str
    name: str
    created_at: Timestamp
    node_count: int
    last_run_status: RunStatus | None = Field(
        default=None, description="Status of the newest run; null before the first run."
    )
    last_run_at: Timestamp | None = Field(default=None, description="When the newest run began.")


class GraphWarning(BaseModel):
    pointer: str = Field(description="JSON Pointer into the workflow body")
    message: str


class WorkflowOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    created_at: Timestamp
    updated_at: Timestamp
    node_count: int
    graph_json: dict[str, Any]
    warnings: list[GraphWarning] = Field(
        default_factory=list,
        description="What keeps the saved graph from running on this server now (a node "
        "whose provider is not configured): saved anyway, refused at execute.",
    )
