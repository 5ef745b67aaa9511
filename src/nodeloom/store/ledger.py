"""Reading the credit ledger of one account, newest entry first (the profile page shows it).

Entries are append-only and their ids grow with time, so the id alone orders them and the
cursor is the last id shown.
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import CreditEntry
from nodeloom.store import Record
from nodeloom.store.paging import decode_tagged, highest_first, tagged_cursor

_LEDGER = cast(sa.Table, CreditEntry.__table__)
# How each kind moves the balance: a hold takes, a release gives back, a charge records what
# a node cost out of what was held and moves nothing.
BALANCE_SIGN = {"grant": 1, "hold": -1, "release": 1, "charge": 0}


CURSOR_TAG = "ledger"


def encode_cursor(entry_id: int) -> str:
    return tagged_cursor(CURSOR_TAG, entry_id)


def page(conn: Connection, account_id: str, limit: int, cursor: str | None) -> list[Record]:
    """``limit + 1`` entries, newest first, so the caller can tell whether more exist."""
    query = sa.select(
        _LEDGER.c.id,
        _LEDGER.c.kind,
        _LEDGER.c.amount,
        _LEDGER.c.run_id,
        _LEDGER.c.node_id,
        _LEDGER.c.note,
        _LEDGER.c.created_at,
    ).where(_LEDGER.c.account_id == account_id)
    below = None if cursor is None else decode_tagged(CURSOR_TAG, cursor)
    return list(conn.execute(highest_first(query, _LEDGER.c.id, limit, below)).all())
