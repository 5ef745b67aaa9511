"""Run events as stored (run_events) and as sent (WebSocket, SSE)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Any

import orjson

from nodeloom.timestamps import format_timestamp


class EventType(StrEnum):
    """Every kind of run event; the one vocabulary of the engine, the API and the clients."""

    RUN_STARTED = "run.started"
    NODE_STARTED = "node.started"
    NODE_PROGRESS = "node.progress"
    # An Approval node waits for a person (engine/approvals.py); its data carries the links.
    NODE_WAITING = "node.waiting"
    NODE_COMPLETED = "node.completed"
    NODE_FAILED = "node.failed"
    NODE_SKIPPED = "node.skipped"
    NODE_CANCELLED = "node.cancelled"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"

    @classmethod
    def ended(cls, status: str) -> EventType:
        """The event that ends a run with ``status`` (completed, failed or cancelled)."""
        return cls(f"run.{status}")

    @property
    def is_final(self) -> bool:
        return self in FINAL_EVENTS


FINAL_EVENTS = frozenset({EventType.RUN_COMPLETED, EventType.RUN_FAILED, EventType.RUN_CANCELLED})


@dataclass(frozen=True)
class Event:
    type: str
    seq: int
    ts: datetime
    run_id: str
    workflow_id: str
    account_id: str
    node_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "type": self.type,
            "seq": self.seq,
            "ts": format_timestamp(self.ts),
            "run_id": self.run_id,
            "workflow_id": self.workflow_id,
        }
        if self.node_id is not None:
            message["node_id"] = self.node_id
        message["data"] = self.data
        return message

    @cached_property
    def message_json(self) -> str:
        """The message as JSON text, encoded once however many listeners it fans out to."""
        return orjson.dumps(self.as_message()).decode()

    @property
    def is_final(self) -> bool:
        return self.type in FINAL_EVENTS
