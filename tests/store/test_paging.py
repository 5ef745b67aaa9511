"""The one paging helper of the stores (store/paging.py): both keys, their cursors, on both
databases; a cursor this server did not issue is 400 with the pointer ``query:cursor``."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial

import pytest

from nodeloom.db.engine import Database
from nodeloom.errors import InvalidRequest
from nodeloom.store import accounts, ledger, workflows
from nodeloom.store.paging import (
    NUMBER_MAX,
    decode_cursor,
    decode_tagged,
    encode_cursor,
    number_cursor,
    tagged_cursor,
)
from tests.conftest import text_graph
from tests.store.test_store import backend as backend  # the fixtures
from tests.store.test_store import db as db


def refused(cursor: str | None, decode: object) -> None:
    assert callable(decode)
    with pytest.raises(InvalidRequest) as caught:
        decode(cursor)
    assert [e.pointer for e in caught.value.errors] == ["query:cursor"]


def test_cursors_round_trip_and_foreign_ones_are_refused() -> None:
    moment = datetime(2026, 11, 28, 3, 0, 0, 123456, tzinfo=UTC)
    assert decode_cursor(encode_cursor(moment, "wf_1")) == (moment, "wf_1")
    assert decode_tagged("ledger", tagged_cursor("ledger", 42)) == 42
    assert number_cursor(None) is None and number_cursor("7") == 7
    assert number_cursor(str(NUMBER_MAX)) == NUMBER_MAX
    for cursor in ("%%%", "bm9wZQ", tagged_cursor("ledger", 3)):
        refused(cursor, decode_cursor)
    for cursor in ("%%%", "bm9wZQ", tagged_cursor("other", 3), encode_cursor(moment, "x")):
        refused(cursor, lambda c: decode_tagged("ledger", c))
    for cursor in ("0", "-1", "x1", str(NUMBER_MAX + 1), ""):
        refused(cursor, number_cursor)


async def test_both_keys_page_newest_first(db: Database) -> None:
    account = await db.write(
        lambda c: accounts.create(
            c, email="p@example.com", password_hash="h", plan="pro", credits=1
        )
    )
    for _ in range(4):
        await db.write(partial(accounts.grant, account_id=account.id, amount=1, note="g"))
    # The ledger: one growing id, a tagged cursor; limit + 1 rows a page.
    seen: list[int] = []
    cursor: str | None = None
    while True:
        rows = await db.read(partial(ledger.page, account_id=account.id, limit=2, cursor=cursor))
        assert len(rows) <= 3
        seen += [r.id for r in rows[:2]]
        if len(rows) <= 2:
            break
        cursor = ledger.encode_cursor(rows[1].id)
    assert seen == sorted(seen, reverse=True) and len(seen) == 5  # the initial grant and four

    # Versions: a growing number, below the one given.
    save = workflows.Save(account.id, None)
    made = await db.write(
        lambda c: workflows.create(
            c, account_id=account.id, name="w", graph_json=text_graph(), save=save
        )
    )
    for _ in range(3):
        await db.write(
            lambda c: workflows.update(
                c, account.id, made.id, name=None, graph_json=text_graph(), save=save
            )
        )
    numbers = [
        r.number
        for r in await db.read(lambda c: workflows.versions_page(c, account.id, made.id, 50, None))
    ]
    assert numbers == [4, 3, 2, 1]
    below = await db.read(lambda c: workflows.versions_page(c, account.id, made.id, 1, numbers[0]))
    assert [r.number for r in below] == [3, 2]  # limit + 1 rows below 4
