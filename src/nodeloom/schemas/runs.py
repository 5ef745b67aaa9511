"""Run and artifact bodies: execute, run status, run lists, artifact metadata."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.schemas.callbacks import callback_url_field
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.timestamps import Timestamp

# One vocabulary: the state machines' own enums (states.py) are the API's too, so the
# schemas, the OpenAPI document, the typed web client and the Python client cannot drift.
RunStatusName = RunStatus
NodeStatusName = NodeStatus
RunTrigger = Literal["api", "webhook", "editor", "schedule", "workflow", "app"]


class ExecuteRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: dict[str, Any] | None = Field(
        default=None, description="Input data for the run's TextInput nodes."
    )
    cache: bool = Field(default=True, description="Reuse earlier identical node outputs.")
    trigger: Literal["api", "editor"] = Field(
        default="api",
        description="What started the run, as the run lists show it; the web app's editor "
        'sends "editor". It changes nothing else.',
    )
    callback_url: str | None = callback_url_field(
        "When the run ends, its record is POSTed here, signed with the account's callback "
        "secret (Standard Webhooks), retried with back-off for about a day. Needs the secret "
        "to exist (POST /api/v1/callbacks/secret); private addresses are refused."
    )


class ExecuteResponse(BaseModel):
    run_id: str
    status: RunStatusName
    estimated_credits: int


class RetryRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    params: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="New params by node id, merged into those nodes' params (a key given "
        "replaces its value; the others are kept). A node given new params runs again, with "
        "every node after it.",
    )
    cache: bool = Field(
        default=True, description="Reuse earlier identical outputs for the nodes that run again."
    )
    graph: Literal["run", "current"] = Field(
        default="run",
        description='"run": the retried run\'s own graph, as it was when it ran. "current": the '
        "workflow as saved now (a fix saved since the run); completed nodes whose type, params "
        "and inputs are unchanged are still reused, the others run.",
    )
    trigger: Literal["api", "editor"] = Field(
        default="api", description='What started the retry; the web app sends "editor".'
    )


class RetryResponse(ExecuteResponse):
    retried_from: str = Field(description="The run this one retries.")


class RunError(BaseModel):
    code: str
    message: str
    node_id: str | None = None


class NodeRunOut(BaseModel):
    node_id: str
    item_index: int | None = Field(
        default=None,
        description="For a node run once per item of a ForEach: which item (0-based); in a "
        "Repeat region: which iteration (0-based). Each item or iteration has its own entry; "
        "null for nodes that run once.",
    )
    item_count: int | None = Field(
        default=None,
        description="For a node run once per item: how many items its ForEach has (so "
        '"3/5" can be shown from the run alone); in a Repeat region: how many iterations the '
        "run has made so far (the bound is the Repeat's max_iterations); null for nodes that "
        "run once.",
    )
    type: str
    status: NodeStatusName
    artifact_id: str | None
    credits_used: int
    cached: bool
    started_at: Timestamp | None
    finished_at: Timestamp | None
    duration_ms: int | None
    child_run_id: str | None = Field(
        default=None,
        description="A Workflow node's run of its sub-workflow (GET /workflows/{the node's "
        "workflow_id}/runs/{child_run_id}).",
    )
    child_workflow_id: str | None = Field(
        default=None, description="The workflow of child_run_id (where to read it)."
    )
    error: dict[str, Any] | None
    server: str | None = Field(
        default=None,
        description="For a ComfyUI node on a fleet (several servers, or the shared pool): the "
        "name of the server that ran its prompt (or holds it now); null for every other node.",
    )


class RunSummary(BaseModel):
    id: str
    workflow_id: str
    status: RunStatusName
    credits_used: int
    estimated_credits: int
    duration_ms: int
    created_at: Timestamp
    finished_at: Timestamp | None
    error: RunError | None
    trigger: RunTrigger = Field(
        description="What started the run: api, webhook, editor, schedule, or workflow "
        "(a Workflow node of another run: parent_run_id)."
    )
    webhook_id: str | None = Field(default=None, description="The webhook, for webhook runs.")
    workflow_version: int | None = Field(
        default=None,
        description="The workflow version the run was started from (GET .../versions/{n}); "
        "null for runs started before versions were kept.",
    )
    retried_from: str | None = Field(
        default=None, description="The failed or cancelled run this run retries, if any."
    )
    parent_run_id: str | None = Field(
        default=None,
        description="The run whose Workflow node started this one (a sub-workflow's run).",
    )
    parent_node_id: str | None = Field(
        default=None, description="That Workflow node's id in the parent run."
    )


class RunListItem(RunSummary):
    """An item of the account-wide run list, which also names each run's workflow."""

    workflow_name: str


class NodeEstimate(BaseModel):
    node_id: str
    type: str
    credits: int = Field(
        description="What the node is charged at most: its flat price plus its price per "
        "second times the longest it may produce; for a node run once per item of a "
        "ForEach, that times the items held. A cached node is charged nothing."
    )


class RunEstimate(BaseModel):
    estimated_credits: int = Field(
        description="What a run of the saved graph would hold: the sum over its nodes."
    )
    credits_balance: int = Field(description="The account's balance now.")
    sufficient: bool = Field(
        description="Whether the balance covers the estimate (else execute answers 402)."
    )
    workflow_version: int = Field(description="The workflow version this estimate is for.")
    nodes: list[NodeEstimate] = Field(description="Each node's part, in graph order.")


class RunOut(RunSummary):
    input: dict[str, Any] | None
    node_runs: list[NodeRunOut]
    retries: list[str] = Field(
        default_factory=list, description="The runs that retry this one, oldest first."
    )
    parent_workflow_id: str | None = Field(
        default=None,
        description="The workflow of parent_run_id (GET /workflows/{parent_workflow_id}/runs/"
        "{parent_run_id}).",
    )


class ArtifactMetadata(BaseModel):
    id: str
    run_id: str
    workflow_id: str
    node_id: str
    content_type: str
    size_bytes: int
    sha256: str
    created_at: Timestamp
    download_url: str
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    kind: Literal["text", "image", "audio", "video", "json"] = Field(
        default="text",
        description="What it holds, as GET /node-types names kinds: `json` for a JSON value "
        "(a ParseJson or JsonBuild output, a failed node's error), downloaded as text/plain.",
    )
