"""Workflow bodies. Create and update are parsed by hand (see routes/workflows.py) so every
problem, missing fields included, is reported together as ``invalid_graph``; these models
document the shapes in OpenAPI and type the responses."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.states import RunStatus
from nodeloom.timestamps import Timestamp


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


MESSAGE_MAX = 1000
_MESSAGE_DOC = "Why this save: kept with the version it makes (at most 1,000 characters)."


class WorkflowCreate(BaseModel):
    name: str = Field(min_length=1, max_length=500)
    graph_json: GraphJson
    message: str | None = Field(default=None, max_length=MESSAGE_MAX, description=_MESSAGE_DOC)


class WorkflowUpdate(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=500)
    graph_json: GraphJson | None = None
    message: str | None = Field(default=None, max_length=MESSAGE_MAX, description=_MESSAGE_DOC)


class RestoreRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    message: str | None = Field(
        default=None,
        max_length=MESSAGE_MAX,
        description='Kept with the new version; default: "Restored version N".',
    )


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
    version: int = Field(
        description="The number of the current version; the ETag header carries it too."
    )
    warnings: list[GraphWarning] = Field(
        default_factory=list,
        description="What keeps the saved graph from running on this server now (a node "
        "whose provider is not configured): saved anyway, refused at execute.",
    )


class VersionAuthor(BaseModel):
    """Who saved a version. All null for the first version of a workflow saved before
    versions were kept; ``via`` null for a workflow made on the server itself (not through
    the API); ``email`` and ``api_key_name`` null once that account or key is gone."""

    account_id: str | None
    email: str | None
    via: Literal["api_key", "jwt"] | None = Field(
        description="The credential used: an API key, or a JWT (the web app)."
    )
    api_key_id: str | None
    api_key_name: str | None


class WorkflowVersionSummary(BaseModel):
    workflow_id: str
    version: int = Field(description="1, 2, 3, ... in the order the saves happened.")
    name: str
    node_count: int
    created_at: Timestamp
    created_by: VersionAuthor
    message: str | None
    restored_from: int | None = Field(
        description="For a restore: the version whose name and graph it saved again."
    )


class WorkflowVersionOut(WorkflowVersionSummary):
    graph_json: dict[str, Any]
