"""The per-process count of batch items in flight per account (engine/items.py): the room a
run gets, its share while others wait, and the wake-up of a run held by another's items."""

from __future__ import annotations

from nodeloom.engine.items import AccountItems, room_of


def test_room_is_the_cap_less_the_others_and_a_share_while_others_wait() -> None:
    assert room_of(64, 0, 0) == 64
    assert room_of(64, 60, 0) == 4
    assert room_of(64, 70, 0) == 0
    assert room_of(64, 0, 1) == 32  # one other run wants items too
    assert room_of(3, 0, 1) == 2  # rounded up; the cap itself still holds
    assert room_of(3, 2, 1) == 1


async def test_a_held_run_is_woken_when_another_runs_items_end() -> None:
    items = AccountItems(cap=4)
    wake_a = items.join("acct", "a")
    wake_b = items.join("acct", "b")
    other = items.join("other-acct", "c")
    items.update("acct", "a", 4)
    assert items.allowed("acct", "b") == 0
    items.update("acct", "b", 0, holding=True)
    assert not wake_b.is_set()
    # Another account is never held by this one's items.
    assert items.allowed("other-acct", "c") == 4
    items.update("acct", "a", 3)  # one of a's items ended
    assert wake_b.is_set() and not wake_a.is_set() and not other.is_set()
    # b waits: a may have only its share (4 / 2) now, b the room left.
    assert items.allowed("acct", "a") == 2
    assert items.allowed("acct", "b") == 1
    wake_b.clear()
    items.leave("acct", "a")
    assert wake_b.is_set()
    assert items.allowed("acct", "b") == 4
