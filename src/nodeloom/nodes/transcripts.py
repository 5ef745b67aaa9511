"""Timed transcripts as text artifacts: what ``SpeechToText`` writes and ``Captions`` reads.

A transcription travels between nodes as text, so it can be shown, edited by a text node or
sent to an LLM like any other. Its default form is WebVTT, the W3C format of timed text that
browsers, players and subtitle editors read: the transcript is the cues' text, and each cue
carries its start and end. ``SpeechToText`` can also write JSON (``{"text", "language",
"duration", "segments": [{"start", "end", "text"}]}``, OpenAI's verbose_json reduced to what
matters) or the bare transcript. ``Captions`` reads WebVTT, SRT and that JSON. Pure
functions, no I/O. See docs/providers.md.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

from nodeloom.sdk._node import NodeFailure

MAX_CUES = 10_000
_TIME = r"(?:(\d+):)?(\d{1,2}):(\d{2})[.,](\d{1,3})"
_CUE_TIMING = re.compile(rf"^\s*{_TIME}\s+-->\s+{_TIME}")


@dataclass(frozen=True)
class Cue:
    start: float  # seconds
    end: float
    text: str


def _stamp(seconds: float) -> str:
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{ms:03d}"


def to_vtt(cues: list[Cue]) -> str:
    blocks = ["WEBVTT"]
    for index, cue in enumerate(cues, 1):
        text = "\n".join(line for line in cue.text.replace("-->", "->").splitlines() if line)
        blocks.append(f"{index}\n{_stamp(cue.start)} --> {_stamp(cue.end)}\n{text}")
    return "\n\n".join(blocks) + "\n"


def to_json(text: str, language: str | None, duration: float, cues: list[Cue]) -> str:
    body = {
        "text": text,
        "language": language,
        "duration": duration,
        "segments": [{"start": c.start, "end": c.end, "text": c.text} for c in cues],
    }
    return json.dumps(body, ensure_ascii=False, indent=2)


def _seconds(groups: tuple[str | None, ...]) -> float:
    hours, minutes, secs, frac = (g or "0" for g in groups)
    millis = int(frac.ljust(3, "0"))  # ".5" is 500 ms
    return ((int(hours) * 3600 + int(minutes) * 60 + int(secs)) * 1000 + millis) / 1000


def _timed_blocks(text: str) -> list[Cue]:
    """The cues of WebVTT or SRT: blocks separated by blank lines, each with a timing line
    (an optional identifier line before it); NOTE, STYLE and header blocks have none."""
    cues = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n")):
        lines = block.strip("\n").split("\n")
        for index, line in enumerate(lines[:2]):
            match = _CUE_TIMING.match(line)
            if match:
                groups = match.groups()
                start, end = _seconds(groups[:4]), _seconds(groups[4:])
                words = " ".join(x.strip() for x in lines[index + 1 :] if x.strip())
                words = re.sub(r"<[^>]*>", "", words)  # WebVTT voice/style tags
                if words and end > start:
                    cues.append(Cue(start, end, words))
                break
    return cues


def segment_cues(segments: list[Any], malformed: NodeFailure) -> list[Cue]:
    """The cues of Whisper-style segments (``{"start", "end", "text"}``, seconds), leaving
    out empty ones and ones that end before they start; ``malformed`` is raised for a
    segment without its three fields."""
    cues = []
    for segment in segments:
        try:
            start, end = float(segment["start"]), float(segment["end"])
            words = str(segment["text"]).strip()
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed from exc
        if words and end > start:
            cues.append(Cue(start, end, words))
    return cues


def _json_cues(body: Any) -> list[Cue]:
    segments = body.get("segments") if isinstance(body, dict) else None
    if not isinstance(segments, list):
        raise NodeFailure("the JSON transcription has no segments list")
    malformed = NodeFailure("a segment of the JSON transcription lacks start, end or text")
    return segment_cues(segments, malformed)


def parse(text: str) -> list[Cue]:
    """The cues of a transcription in WebVTT, SRT or SpeechToText's JSON, sorted by start;
    NodeFailure for anything else (plain text has no timings)."""
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        try:
            cues = _json_cues(json.loads(stripped))
        except ValueError as exc:
            raise NodeFailure("the transcription is not valid JSON") from exc
    elif (
        stripped.startswith("WEBVTT")
        or _CUE_TIMING.search(stripped.split("\n\n", 1)[0])
        or (re.match(r"^\d+\s*\n", stripped) and "-->" in stripped)
    ):
        cues = _timed_blocks(stripped)
    else:
        raise NodeFailure(
            "the text input is not a transcription with timings: connect SpeechToText "
            "(format vtt or json), or give WebVTT or SRT"
        )
    if len(cues) > MAX_CUES:
        raise NodeFailure(f"the transcription has more than {MAX_CUES:,} cues")
    return sorted(cues, key=lambda c: c.start)


def active(cues: list[Cue], starts: list[float], seconds: float) -> int | None:
    """The index of the cue shown at ``seconds``: the latest one started by then, if it has
    not ended (``starts``: the cues' starts, sorted, for the binary search)."""
    index = bisect.bisect_right(starts, seconds) - 1
    if index >= 0 and seconds < cues[index].end:
        return index
    return None
