"""Run events as stored (run_events) and as sent (WebSocket, SSE)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import orjson

from nodeloom.schemas.common import format_timestamp


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


FINAL_EVENTS = frozenset({"run.completed", "run.failed"})
