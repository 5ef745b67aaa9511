"""Timed transcripts as text (nodes/transcripts.py): what SpeechToText writes, Captions reads
back exactly, in WebVTT and JSON; SRT from other tools is read too; plain text is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeloom.nodes import transcripts
from nodeloom.nodes.transcripts import Cue
from nodeloom.sdk._node import NodeFailure

words = (
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1)
    .map(lambda t: " ".join(t.split()))
    .filter(lambda t: t != "" and "<" not in t and "-->" not in t)
)


@st.composite
def cue_lists(draw: st.DrawFn) -> list[Cue]:
    cues, start = [], 0.0
    for text in draw(st.lists(words, max_size=8)):
        start += draw(st.integers(0, 5000)) / 1000
        end = start + draw(st.integers(1, 5000)) / 1000
        cues.append(Cue(round(start, 3), round(end, 3), text))
        start = end
    return cues


@given(cue_lists())
def test_webvtt_and_json_round_trip(cues: list[Cue]) -> None:
    assert transcripts.parse(transcripts.to_vtt(cues)) == cues
    assert transcripts.parse(transcripts.to_json("t", "en", 1.0, cues)) == cues


def test_srt_and_webvtt_from_other_tools() -> None:
    srt = (
        "1\r\n00:00:01,500 --> 00:00:03,000\r\nFirst line\r\nsecond line\r\n\r\n"
        "2\r\n01:00:00,000 --> 01:00:01,250\r\n<i>Later</i>\r\n"
    )
    assert transcripts.parse(srt) == [
        Cue(1.5, 3.0, "First line second line"),
        Cue(3600.0, 3601.25, "Later"),
    ]
    vtt = (
        "WEBVTT - made elsewhere\n\nNOTE a comment\n\n"
        "00:02.5 --> 00:04.000 align:start\n<v Ann>Hi</v>\n"
    )
    assert transcripts.parse(vtt) == [Cue(2.5, 4.0, "Hi")]


def test_active_cue_at_a_time() -> None:
    cues = [Cue(0.0, 1.0, "a"), Cue(1.5, 2.0, "b")]
    starts = [c.start for c in cues]
    assert [transcripts.active(cues, starts, t) for t in (0.0, 0.99, 1.0, 1.2, 1.5, 2.0)] == [
        0,
        0,
        None,
        None,
        1,
        None,
    ]


@pytest.mark.parametrize("text", ["just words", "", '{"no": "segments"}', "{not json"])
def test_text_without_timings_is_refused(text: str) -> None:
    with pytest.raises(NodeFailure):
        transcripts.parse(text)
