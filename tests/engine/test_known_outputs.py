"""The outputs an accepting process knows stored (ADR 0029): the newest artifact of a key
wins, only bytes kept in their row are known, and the memory they take is bounded."""

from __future__ import annotations

from nodeloom.engine.known_outputs import KnownOutputs
from nodeloom.engine.run_state import ArtifactInfo


def art(artifact_id: str, data: bytes | None = b"text") -> ArtifactInfo:
    size = len(data) if data is not None else 10
    return ArtifactInfo(artifact_id, "text/plain", size, "sha", None, None, None, data)


def test_the_newest_artifact_of_a_key_is_the_one_known() -> None:
    known = KnownOutputs()
    known.remember("acct", "k", art("0002"))
    known.remember("acct", "k", art("0001"))  # older: not taken
    assert (found := known.get("acct", "k")) is not None and found.id == "0002"
    known.remember("acct", "k", art("0003"))
    assert (found := known.get("acct", "k")) is not None and found.id == "0003"
    assert known.get("other", "k") is None  # per account
    known.forget("acct", ["k"])
    assert known.get("acct", "k") is None and len(known) == 0


def test_only_outputs_kept_in_their_row_and_within_the_budget() -> None:
    known = KnownOutputs(budget_bytes=64 * 100, max_entries=3)
    known.remember("acct", "stored elsewhere", art("0001", None))
    known.remember("acct", "too large", art("0002", b"x" * 101))  # over budget / 64
    assert len(known) == 0
    for i in range(5):
        known.remember("acct", f"k{i}", art(f"000{i}", b"x" * 100))
    assert len(known) == 3  # the least recently used went first
    assert known.get("acct", "k0") is None and known.get("acct", "k4") is not None
    known = KnownOutputs(budget_bytes=64 * 100, max_entries=1000)
    for i in range(70):
        known.remember("acct", f"k{i}", art(f"{i:04}", b"x" * 100))
    assert len(known) == 64  # 64 x 100 bytes fill the budget
