"""The WebSocket client messages (docs/events.md), parsed without touching the network.

Client -> server::

    {"type": "subscribe",   "run_id": "...", "after_seq": 0}   # after_seq optional
    {"type": "subscribe",   "workflow_id": "..."}
    {"type": "unsubscribe", "run_id": "..."} | {"type": "unsubscribe", "workflow_id": "..."}
    {"type": "ping"}

Server -> client, besides the events themselves::

    {"type": "subscribed" | "unsubscribed", "run_id" | "workflow_id": "..."}
    {"type": "pong"}   {"type": "ping"} (heartbeat; a client may ignore it)
    {"type": "error", "code": "invalid_request" | "not_found", "detail": "...", ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

MAX_MESSAGE_BYTES = 4096


class BadMessage(ValueError):
    """A client message that cannot be understood (answered with ``invalid_request``)."""


@dataclass(frozen=True)
class Ping:
    pass


@dataclass(frozen=True)
class Subscribe:
    kind: Literal["run", "workflow"]
    id: str
    after_seq: int = 0


@dataclass(frozen=True)
class Unsubscribe:
    kind: Literal["run", "workflow"]
    id: str


ClientMessage = Ping | Subscribe | Unsubscribe


def parse(text: str | None) -> ClientMessage:
    if text is None:
        raise BadMessage("Send JSON text frames, not binary ones.")
    if len(text) > MAX_MESSAGE_BYTES:
        raise BadMessage(f"Messages are limited to {MAX_MESSAGE_BYTES} bytes.")
    try:
        body: Any = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadMessage("The message is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise BadMessage("The message must be a JSON object with a 'type'.")
    type_ = body.get("type")
    if type_ == "ping":
        return Ping()
    if type_ not in ("subscribe", "unsubscribe"):
        raise BadMessage("'type' must be one of 'subscribe', 'unsubscribe', 'ping'.")
    run_id, workflow_id = body.get("run_id"), body.get("workflow_id")
    if (run_id is None) == (workflow_id is None):
        raise BadMessage(f"'{type_}' takes exactly one of 'run_id' and 'workflow_id'.")
    key, kind = ("run_id", "run") if run_id is not None else ("workflow_id", "workflow")
    value = body[key]
    if not isinstance(value, str) or not value or "\x00" in value or len(value) > 200:
        raise BadMessage(f"'{key}' must be a non-empty string of at most 200 characters.")
    if type_ == "unsubscribe":
        return Unsubscribe("run" if kind == "run" else "workflow", value)
    after = body.get("after_seq", 0)
    if kind != "run" and "after_seq" in body:
        raise BadMessage("'after_seq' applies to run subscriptions only.")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise BadMessage("'after_seq' must be a non-negative integer.")
    return Subscribe("run" if kind == "run" else "workflow", value, after)


def error(code: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "code": code, "detail": detail, **extra}
