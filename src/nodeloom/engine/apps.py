"""Workflow apps: a saved version of a workflow published as a form other people use.

What an app may show is derived from its pinned version's graph: a form field per input node
(a ``TextInput``'s key, or ``text`` when it has none; a media input's key) and any of its
nodes as an output. A visitor's values become the run's input data through ``run_input``
alone: only the form's keys, text within the field's length, media only as files uploaded
with the run (never an id: an id would let a visitor name the owner's other assets).

A run started through an app is admitted by its own acceptance transaction (``admit``, the
``on_accept`` of the run request): the app's row is taken (a row lock on PostgreSQL, so the
runs of one app are admitted one after the other), the run is tied to the app and to its
visitor token's hash, and then the limits are checked with the new run counted — the runs
going at once, the credits of the UTC day and in total. A limit it would pass rolls the
whole acceptance back: nothing is held, charged or started. Spent credits are what finished
runs were charged plus what running ones hold, so two runs can never both start on the last
of a budget.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.auth.tokens import keyed_hash, sign_url
from nodeloom.errors import AppBudgetExhausted, FieldError, InvalidRequest, NotFound, RateLimited
from nodeloom.schemas.apps import AppInput, AppOutput
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.store import Record
from nodeloom.store import apps as app_store
from nodeloom.timestamps import format_timestamp

INPUT_KINDS: Mapping[str, str] = {
    "TextInput": "text",
    "ImageInput": "image",
    "AudioInput": "audio",
    "VideoInput": "video",
}
MEDIA_INPUT_TYPES = frozenset(t for t, kind in INPUT_KINDS.items() if kind != "text")
ARTIFACT_URL_SECONDS = 24 * 3600
_TOKEN_PURPOSE = "app-visitor"  # noqa: S105 - a key space, not a secret
_FINISHED = {NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.SKIPPED, NodeStatus.CANCELLED}


def _nodes(graph_json: Any) -> list[dict[str, Any]]:
    nodes = graph_json.get("nodes") if isinstance(graph_json, dict) else None
    return [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []


def input_keys(graph_json: Any) -> dict[str, str]:
    """The run-input keys the graph's input nodes read, with their kind."""
    keys: dict[str, str] = {}
    for node in _nodes(graph_json):
        kind = INPUT_KINDS.get(str(node.get("type")))
        if kind is None:
            continue
        data = node.get("data") if isinstance(node.get("data"), dict) else {}
        key = data.get("key") if isinstance(data, dict) else None
        if kind == "text" and not key:
            key = "text"
        if isinstance(key, str) and key:
            keys.setdefault(key, kind)
    return keys


def form(
    graph_json: Any, inputs: list[AppInput] | None, outputs: list[AppOutput]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The form fields and outputs as stored, checked against the version's graph (400 with
    a pointer at each field that names no input node or no node). ``inputs`` None: every
    input node, labelled by its key."""
    keys = input_keys(graph_json)
    node_ids = {str(n.get("id")) for n in _nodes(graph_json)}
    problems: list[FieldError] = []
    fields: list[dict[str, Any]] = []
    chosen = inputs if inputs is not None else [AppInput(key=k, label=k) for k in keys]
    seen: set[str] = set()
    for i, field in enumerate(chosen):
        kind = keys.get(field.key)
        if kind is None:
            problems.append(FieldError(f"/inputs/{i}/key", "no input node reads this key"))
        elif field.key in seen:
            problems.append(FieldError(f"/inputs/{i}/key", "the key is shown twice"))
        elif kind != "text" and field.default is not None:
            problems.append(FieldError(f"/inputs/{i}/default", "only text fields have one"))
        else:
            fields.append({**field.model_dump(), "label": field.label or field.key, "kind": kind})
        seen.add(field.key)
    shown: list[dict[str, Any]] = []
    for i, output in enumerate(outputs):
        if output.node_id not in node_ids:
            problems.append(FieldError(f"/outputs/{i}/node_id", "the version has no such node"))
        else:
            shown.append({"node_id": output.node_id, "label": output.label or output.node_id})
    if problems:
        raise InvalidRequest(
            "The form does not match the workflow version: "
            + "; ".join(f"{p.pointer}: {p.message}" for p in problems),
            errors=problems,
        )
    return fields, shown


def run_input(
    fields: list[dict[str, Any]], values: Mapping[str, Any], files: Mapping[str, str]
) -> dict[str, Any]:
    """The run's input data from a visitor's ``values`` (text) and ``files`` (key -> the
    asset each upload became): the form's keys only; anything else sent is ignored, except
    a file for a key the form does not take (400)."""
    by_key = {f["key"]: f for f in fields}
    problems = [
        FieldError(f"form:{key}", "the form has no media field with this key")
        for key in files
        if by_key.get(key, {}).get("kind", "text") == "text"
    ]
    data: dict[str, Any] = {}
    for field in fields:
        key, kind = field["key"], field["kind"]
        if kind == "text":
            value = values.get(key, field.get("default"))
            if value is None or value == "":
                if field["required"]:
                    problems.append(FieldError(f"/input/{key}", "this field is required"))
                continue
            if not isinstance(value, str):
                problems.append(FieldError(f"/input/{key}", "must be a string"))
            elif len(value) > field["max_length"]:
                limit = field["max_length"]
                problems.append(FieldError(f"/input/{key}", f"at most {limit} characters"))
            else:
                data[key] = value
        elif key in files:
            data[key] = files[key]
        elif key in values:
            problems.append(FieldError(f"/input/{key}", "send the file itself (multipart)"))
        elif field["required"]:
            problems.append(FieldError(f"form:{key}", "this file is required"))
    if problems:
        raise InvalidRequest(
            "The form is not filled in as the app asks: "
            + "; ".join(f"{p.pointer}: {p.message}" for p in problems),
            errors=problems,
        )
    return data


def new_slug() -> str:
    """128 random bits, URL-safe: unguessable, so a link app is found only through its link."""
    return secrets.token_urlsafe(16)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(secret: bytes, token: str) -> str:
    return keyed_hash(secret, token, _TOKEN_PURPOSE)


def day_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def admission(app: Record, token_digest: str, now: datetime) -> Callable[[Connection, str], None]:
    """The ``on_accept`` of an app's run: see the module's docstring."""

    def admit(conn: Connection, run_id: str) -> None:
        if not app_store.lock_published(conn, app.id):
            raise NotFound("No such app.")
        app_store.record_run(conn, app.id, run_id, token_digest)
        if app.max_concurrent is not None and app_store.running(conn, app.id) > app.max_concurrent:
            raise RateLimited(
                f"This app runs at most {app.max_concurrent} runs at once; retry shortly.",
                headers={"Retry-After": "5"},
            )
        if app.budget_total is not None and app_store.spent(conn, app.id, None) > app.budget_total:
            raise AppBudgetExhausted(
                "This app has used all the credits its owner gave it.",
                extra={"budget": "total"},
            )
        today = day_start(now)
        if app.budget_daily is not None and app_store.spent(conn, app.id, today) > app.budget_daily:
            tomorrow = today + timedelta(days=1)
            wait = max(1, int((tomorrow - now).total_seconds()))
            raise AppBudgetExhausted(
                "This app has used its credits for today; it takes runs again at "
                f"{format_timestamp(tomorrow)}.",
                headers={"Retry-After": str(wait)},
                extra={"budget": "daily", "resets_at": format_timestamp(tomorrow)},
            )

    return admit


def visitor_record(
    secret: bytes,
    app: Record,
    run: Record,
    nodes: Iterable[Record],
    artifacts: Mapping[str, Record],
    now: datetime,
) -> dict[str, Any]:
    """The run as its visitor sees it: status, progress, the shown outputs with signed
    download addresses; no graph, no input, no other node, no credits."""
    listed = list(nodes)
    by_node = {n.node_id: n for n in listed}
    finished = sum(1 for n in listed if n.status in _FINISHED)
    outputs = []
    for shown in app.outputs:
        node = by_node.get(shown["node_id"])
        out: dict[str, Any] = {
            "node_id": shown["node_id"],
            "label": shown["label"],
            "status": node.status if node is not None else NodeStatus.PENDING.value,
        }
        artifact = (
            artifacts.get(node.artifact_id) if node is not None and node.artifact_id else None
        )
        if artifact is not None and node is not None and node.status == NodeStatus.COMPLETED:
            path = f"/api/v1/artifacts/{artifact.id}"
            out["content_type"] = artifact.content_type
            out["url"] = f"{path}?{sign_url(secret, path, ARTIFACT_URL_SECONDS)}"
            if artifact.content_type.startswith("text/") and artifact.data is not None:
                out["text"] = bytes(artifact.data).decode("utf-8", "replace")
        outputs.append(out)
    end = run.finished_at or now
    error = None
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        code = (run.error or {}).get("code") if isinstance(run.error, dict) else None
        cancelled = run.status == RunStatus.CANCELLED or code == "cancelled"
        error = {
            "code": "cancelled" if cancelled else "run_failed",
            "message": "The run was stopped." if cancelled else "The run failed.",
        }
    return {
        "run_id": run.id,
        "status": run.status,
        "progress": 1.0 if run.status != RunStatus.RUNNING else finished / max(1, len(listed)),
        "created_at": format_timestamp(run.created_at),
        "finished_at": format_timestamp(run.finished_at) if run.finished_at else None,
        "duration_ms": int((end - run.created_at).total_seconds() * 1000),
        "error": error,
        "outputs": outputs,
    }
