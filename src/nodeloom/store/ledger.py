"""Reading the credit ledger of one account, newest entry first (the profile page shows it).

Entries are append-only and their ids grow with time, so the id alone orders them and the
cursor is the last id shown.
"""

from __future__ import annotations

import base64
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import CreditEntry
from nodeloom.errors import FieldError, InvalidRequest
from nodeloom.store import Record

_LEDGER = cast(sa.Table, CreditEntry.__table__)
# How each kind moves the balance: a hold takes, a release gives back, a charge records what
# a node cost out of what was held and moves nothing.
BALANCE_SIGN = {"grant": 1, "hold": -1, "release": 1, "charge": 0}


def encode_cursor(entry_id: int) -> str:
    return base64.urlsafe_b64encode(f"ledger|{entry_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, value = raw.split("|", 1)
        if tag != "ledger":
            raise ValueError(tag)
        return int(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            "cursor is not one this server issued",
            errors=[FieldError("query:cursor", "invalid cursor")],
        ) from exc


def page(conn: Connection, account_id: str, limit: int, cursor: str | None) -> list[Record]:
    """``limit + 1`` entries, newest first, so the caller can tell whether more exist."""
    query = (
        sa.select(
            _LEDGER.c.id,
            _LEDGER.c.kind,
            _LEDGER.c.amount,
            _LEDGER.c.run_id,
            _LEDGER.c.node_id,
            _LEDGER.c.note,
            _LEDGER.c.created_at,
        )
        .where(_LEDGER.c.account_id == account_id)
        .order_by(_LEDGER.c.id.desc())
        .limit(limit + 1)
    )
    if cursor is not None:
        query = query.where(_LEDGER.c.id < _decode_cursor(cursor))
    return list(conn.execute(query).all())
