"""The Idempotency-Key of a run request: what it promises to repeat (``request_hash``), the
answer stored for it (24 hours), and the row the acceptance transaction writes.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any, cast

import orjson
import sqlalchemy as sa

from nodeloom.db.engine import Database
from nodeloom.db.models import IdempotencyKey, Run, utcnow
from nodeloom.db.prepared import Prepared
from nodeloom.engine.run_request import RunRequest
from nodeloom.errors import (
    IdempotencyKeyReused,
)

_RUNS = cast(sa.Table, Run.__table__)
_IDEMPOTENCY = cast(sa.Table, IdempotencyKey.__table__)


_EARLIER = Prepared(
    sa.select(
        _IDEMPOTENCY.c.response,
        _IDEMPOTENCY.c.created_at,
        _IDEMPOTENCY.c.request_hash,
        _RUNS.c.workflow_id,
    )
    .join(_RUNS, _RUNS.c.id == _IDEMPOTENCY.c.run_id)
    .where(
        _IDEMPOTENCY.c.account_id == sa.bindparam("account"),
        _IDEMPOTENCY.c.key == sa.bindparam("key"),
    )
)


FORGET_EXPIRED = Prepared(
    sa.delete(_IDEMPOTENCY).where(
        _IDEMPOTENCY.c.account_id == sa.bindparam("account"),
        _IDEMPOTENCY.c.key == sa.bindparam("key"),
        _IDEMPOTENCY.c.created_at < sa.bindparam("cutoff", type_=_IDEMPOTENCY.c.created_at.type),
    )
)


REMEMBER = Prepared(sa.insert(_IDEMPOTENCY))


IDEMPOTENCY_TTL = timedelta(hours=24)


def request_hash(request: RunRequest) -> str:
    """What an Idempotency-Key promises to repeat: this workflow, this input, this cache."""
    material: dict[str, Any] = {
        "workflow_id": request.workflow_id,
        "input": request.run_input,
        "cache": request.use_cache,
    }
    if request.retry_of is not None:
        material["retry_of"] = request.retry_of
        material["params"] = request.retry_params or {}
        if request.retry_current:  # absent otherwise: earlier keys keep their hash
            material["graph"] = "current"
    if request.callback_url is not None:  # absent otherwise: earlier keys keep their hash
        material["callback_url"] = request.callback_url
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def earlier_answer(db: Database, request: RunRequest) -> dict[str, Any] | None:
    """The stored answer for the request's Idempotency-Key used in the last 24 hours, if
    any. A key reused for a different request (another workflow, another input) is refused
    (422, as Stripe does), never answered with the first request's run."""
    rows = await db.fetch(_EARLIER, {"account": request.account_id, "key": request.idempotency_key})
    return answer_of(rows.first(), request)


def answer_of(row: Any, request: RunRequest) -> dict[str, Any] | None:
    """``earlier_answer`` from the key's row as read (``response``, ``created_at``,
    ``request_hash`` and its run's ``workflow_id``; None, or a ``created_at`` of None, when
    the account has no such key)."""
    if row is None or row.created_at is None or row.created_at < utcnow() - IDEMPOTENCY_TTL:
        return None
    if row.workflow_id != request.workflow_id or (
        row.request_hash is not None and row.request_hash != request_hash(request)
    ):
        raise IdempotencyKeyReused(
            "This Idempotency-Key was already used for a different request (another workflow "
            "or another body); use a new key for a new request."
        )
    answer: dict[str, Any] = row.response
    return answer


def key_row(
    request: RunRequest, run_id: str, answer: dict[str, Any], at: datetime
) -> dict[str, Any]:
    """The Idempotency-Key row of an accepted run: the answer it repeats."""
    return {
        "account_id": request.account_id,
        "key": request.idempotency_key,
        "run_id": run_id,
        "response": answer,
        "created_at": at,
        "request_hash": request_hash(request),
    }
