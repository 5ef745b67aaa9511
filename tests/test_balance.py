"""How a process of ``serve --processes N`` decides to let connections go (api/balance.py)."""

from __future__ import annotations

from nodeloom.api.balance import SLACK, ConnectionShare


def test_a_process_over_its_share_lets_the_surplus_go() -> None:
    counts = [0, 15]
    share = ConnectionShare(counts, 0)
    share.publish(35)  # 50 connections, a fair share of 25
    assert counts == [35, 15]
    gone = sum(share.let_go() for _ in range(20))
    assert gone == 35 - 25 - SLACK
    assert not share.let_go()


def test_a_process_within_its_share_keeps_every_connection() -> None:
    counts = [0, 24]
    share = ConnectionShare(counts, 0)
    for held in (0, 10, 24, 26):
        share.publish(held)
        assert not share.let_go()


def test_what_was_let_go_is_counted_again_at_the_next_publish() -> None:
    counts = [0, 10]
    share = ConnectionShare(counts, 0)
    share.publish(20)
    assert sum(share.let_go() for _ in range(10)) == 4
    counts[1] = 14  # four closed; their clients came back on the other process
    share.publish(16)
    assert not share.let_go()
