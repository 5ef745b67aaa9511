"""What asks for a run (``RunRequest``: execute, a webhook trigger, a schedule, a retry, a
sub-workflow, an app) and what accepting it answers. Data only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.engine.graph import Graph
from nodeloom.engine.retry import RetrySource
from nodeloom.engine.transitions import (
    WebhookAsRead,
)

# Reading the workflow and creating its run are two transactions; if the workflow is saved
# in between, the run is prepared again from the new version (a few times at most).
ATTEMPTS = 3


@dataclass(frozen=True)
class RunRequest:
    account_id: str
    workflow_id: str
    run_input: dict[str, Any] | None
    use_cache: bool
    plan: str
    webhook_id: str | None = None
    idempotency_key: str | None = None
    # "api", "webhook" or "editor": shown in the run lists, decides nothing else.
    trigger: str = "api"
    # The process that will drive the run (the embedded mode), or None: queue workers run
    # its nodes one by one, and its roots are queued at once.
    driver: str | None = None
    # The workflow's updated_at when the caller has already read it (a webhook's look-up):
    # its checked graph may then come from the cache without reading the workflow again.
    workflow_version: datetime | None = None
    # A retry (engine/retry.py): the failed or cancelled run it retries, and the params it
    # changes (node id -> params). The input is the retried run's.
    retry_of: str | None = None
    retry_params: dict[str, dict[str, Any]] | None = None
    # The retry runs the workflow as saved now rather than the retried run's graph.
    retry_current: bool = False
    # Where the run's record is POSTed, signed, when it ends (engine/callbacks.py).
    callback_url: str | None = None
    # A sub-workflow's run (engine/subworkflows.py): the run and Workflow node starting it.
    parent_run_id: str | None = None
    parent_node_id: str | None = None
    # A webhook trigger: the webhook as the trigger checked it, checked again by the
    # acceptance transaction (TriggerStale when it changed).
    webhook_as_read: WebhookAsRead | None = None
    # The length in ms of the media input file a node's price follows, read at acceptance
    # (engine/media_lengths.py): it bounds that node's hold.
    media_lengths: Mapping[str, int] | None = None
    # An app's run (engine/apps.py): the saved version it runs, whatever the workflow's
    # current one, and a check made by the acceptance transaction once the run is written
    # (given the connection and the run's id; raising rolls the acceptance back).
    pinned_version: int | None = None
    on_accept: Callable[[Connection, str], None] | None = None


class TriggerStale(Exception):
    """The webhook of a trigger changed since the trigger read it (``webhook_as_read``): the
    trigger reads it again and is answered as the webhook now is (api/routes/webhooks.py).
    Never reaches a client."""


@dataclass(frozen=True)
class Accepted:
    answer: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class WorkflowVersion:
    id: str
    updated_at: datetime
    graph: Graph
    retry: RetrySource | None = None
