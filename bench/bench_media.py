"""Media benchmark: a 200-word narrated 1280x720 video (TextToSpeech -> RenderText 1280x720
-> ImageAudioToVideo) and RenderText 1024x1024, run through the real node code with
``media.LocalContext`` (no server, no sandbox: the nodes' own cost). Prints the median wall
time of several narrated videos after one warm-up, each stage's share, the CPU seconds they
took (wall time on a shared 2-core machine is noisy; CPU time much less so) and the peak RSS;
then, for information, the same video with a Ken Burns title joined before it, the shape of
examples/narrated-video.json.

    .venv/bin/python -m bench.bench_media [--repeat 7] [--example-repeat 3] [--write]

Targets: narrated video <= 2.5 s wall (issue 14) and < 500 MB peak RSS; RenderText
1024x1024 < 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import table, write_section
from nodeloom.nodes import media
from nodeloom.nodes.image import RenderText, RenderTextParams
from nodeloom.nodes.speech import TextToSpeech, TextToSpeechParams
from nodeloom.nodes.video import (
    ImageAudioToVideo,
    ImageAudioToVideoParams,
    KenBurns,
    KenBurnsParams,
    VideoConcat,
    VideoConcatParams,
)
from nodeloom.sdk._node import CONTENT_TYPES, ArtifactRef, Kind, Produced
from nodeloom.settings import Settings

COMMAND = ".venv/bin/python -m bench.bench_media --write"
TARGET_WALL_S = 2.5
TARGET_RSS_MB = 500
TARGET_RENDER_MS = 300
WORDS = (
    "Nodeloom turns a few lines of text into a narrated video without leaving your own "
    "machine. The speech comes from a local engine, the picture is drawn with a bundled "
    "font that knows accents and Cyrillic, and the result is an ordinary file that every "
    "browser plays."
).split()


def two_hundred_words() -> str:
    words = (WORDS * (200 // len(WORDS) + 1))[:200]
    return " ".join(words)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cpu_seconds() -> float:
    """User + system time of this process, all threads (the encoders run in helpers)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Narrated:
    """One narrated video: wall time per stage and CPU time overall."""

    speech_s: float
    render_s: float
    video_s: float
    cpu_s: float
    video_seconds: float
    video_mb: float

    @property
    def wall_s(self) -> float:
        return self.speech_s + self.render_s + self.video_s


class Pipeline:
    """The three nodes of the narrated video, fed through artifacts as the executor would."""

    def __init__(self, root: Path) -> None:
        settings = Settings(data_dir=root / "data", secret_key="b" * 40)
        self.ctx = media.LocalContext(settings, root / "scratch")
        self.store = root / "artifacts"
        self.text = self.put(Produced.text(two_hundred_words()), Kind.TEXT)

    def put(self, produced: Produced, kind: Kind) -> ArtifactRef:
        return media.store_locally(produced, CONTENT_TYPES[kind], self.store)

    async def narrated_video(self) -> Narrated:
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        speech = await TextToSpeech().run(
            self.ctx, TextToSpeechParams(max_seconds=300), {"text": self.text}
        )
        t1 = time.perf_counter()
        audio = self.put(speech, Kind.AUDIO)
        picture = await RenderText().run(
            self.ctx, RenderTextParams(width=1280, height=720), {"text": self.text}
        )
        t2 = time.perf_counter()
        image = self.put(picture, Kind.IMAGE)
        video = await ImageAudioToVideo().run(
            self.ctx, ImageAudioToVideoParams(max_seconds=300), {"image": image, "audio": audio}
        )
        t3, cpu3 = time.perf_counter(), cpu_seconds()
        assert video.path is not None
        return Narrated(
            speech_s=t1 - t0,
            render_s=t2 - t1,
            video_s=t3 - t2,
            cpu_s=cpu3 - cpu0,
            video_seconds=(video.duration_ms or 0) / 1000,
            video_mb=video.path.stat().st_size / 1e6,
        )

    async def example_video_s(self) -> float:
        """examples/narrated-video.json's shape at 200 words: a Ken Burns title (3 s) joined
        before the narrated video, so VideoConcat re-encodes both and the sound to AAC."""
        t0 = time.perf_counter()
        title_text = self.put(Produced.text("The lighthouse keeper"), Kind.TEXT)
        card = await RenderText().run(
            self.ctx, RenderTextParams(width=1280, height=720), {"text": title_text}
        )
        title = await KenBurns().run(
            self.ctx,
            KenBurnsParams(seconds=3, zoom_end=1.15),
            {"image": self.put(card, Kind.IMAGE)},
        )
        speech = await TextToSpeech().run(
            self.ctx, TextToSpeechParams(max_seconds=300), {"text": self.text}
        )
        picture = await RenderText().run(
            self.ctx, RenderTextParams(width=1280, height=720), {"text": self.text}
        )
        body = await ImageAudioToVideo().run(
            self.ctx,
            ImageAudioToVideoParams(max_seconds=300),
            {"image": self.put(picture, Kind.IMAGE), "audio": self.put(speech, Kind.AUDIO)},
        )
        clips = [self.put(title, Kind.VIDEO), self.put(body, Kind.VIDEO)]
        await VideoConcat().run(self.ctx, VideoConcatParams(max_seconds=300), {"videos": clips})
        return time.perf_counter() - t0

    async def render_1024_ms(self) -> float:
        t0 = time.perf_counter()
        await RenderText().run(self.ctx, RenderTextParams(), {"text": self.text})
        return (time.perf_counter() - t0) * 1000


async def measure(repeat: int, example_repeat: int) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        pipeline = Pipeline(Path(tmp))
        warm_up = await pipeline.narrated_video()  # loads eSpeak, fonts, codecs
        runs = [await pipeline.narrated_video() for _ in range(repeat)]
        render_ms = [await pipeline.render_1024_ms() for _ in range(5)]
        examples = [await pipeline.example_video_s() for _ in range(example_repeat)]
    walls = sorted(r.wall_s for r in runs)

    def med(name: str) -> float:
        return round(statistics.median(getattr(r, name) for r in runs), 3)

    return {
        "narrated_video_wall_s": round(statistics.median(walls), 3),
        "narrated_video_wall_min_max_s": [round(walls[0], 3), round(walls[-1], 3)],
        "  speech_s": med("speech_s"),
        "  render_720p_s": med("render_s"),
        "  video_encode_s": med("video_s"),
        "narrated_video_cpu_s": med("cpu_s"),
        "first_run_wall_s": round(warm_up.wall_s, 3),
        "runs": repeat,
        "example_runs": example_repeat,
        "video_seconds": runs[0].video_seconds,
        "video_mb": round(runs[0].video_mb, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "render_text_1024_median_ms": round(statistics.median(render_ms), 1),
        "example_with_ken_burns_title_s": round(statistics.median(examples), 2)
        if examples
        else None,
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def met(results: dict[str, Any]) -> bool:
    return bool(
        results["narrated_video_wall_s"] <= TARGET_WALL_S
        and results["peak_rss_mb"] < TARGET_RSS_MB
        and results["render_text_1024_median_ms"] < TARGET_RENDER_MS
    )


def section(results: dict[str, Any]) -> str:
    low, high = results["narrated_video_wall_min_max_s"]
    rows = [
        ("narrated video, wall (median)", f"{results['narrated_video_wall_s']} s"),
        ("narrated video, wall (min-max)", f"{low}-{high} s"),
        ("of which TextToSpeech (200 words)", f"{results['  speech_s']} s"),
        ("of which RenderText 1280x720", f"{results['  render_720p_s']} s"),
        ("of which ImageAudioToVideo", f"{results['  video_encode_s']} s"),
        ("narrated video, CPU (median, all threads)", f"{results['narrated_video_cpu_s']} s"),
        ("first run (eSpeak, fonts and codecs loading)", f"{results['first_run_wall_s']} s"),
        ("video length / size", f"{results['video_seconds']} s / {results['video_mb']} MB"),
        ("peak RSS", f"{results['peak_rss_mb']} MB"),
        ("RenderText 1024x1024 (median of 5)", f"{results['render_text_1024_median_ms']} ms"),
        (
            f"with a 3 s Ken Burns title joined before it (median of {results['example_runs']})",
            f"{results['example_with_ken_burns_title_s']} s",
        ),
        ("load average before / after", " / ".join(map(str, results["load_average_before_after"]))),
    ]
    verdict = "met" if met(results) else "missed"
    return (
        "### Media: 200-word narrated 1280x720 video; RenderText 1024x1024\n\n"
        + table(rows, ("measure", "value"))
        + f"\n\nMedian of {results['runs']} narrated videos after one warm-up, each "
        "TextToSpeech -> RenderText -> ImageAudioToVideo run one after the other through the "
        "node code (no server, no sandbox). The machine is shared: a load average above 2 "
        "means other work held the cores, and the wall times spread accordingly; the CPU "
        f"time moves much less. Target: <= {TARGET_WALL_S} s wall, < {TARGET_RSS_MB} MB, "
        f"RenderText < {TARGET_RENDER_MS} ms: {verdict}. The last row is the shape of "
        "examples/narrated-video.json (title card -> KenBurns, narrated video, VideoConcat), "
        "for information: VideoConcat re-encodes every frame it is given and the joined sound "
        "to AAC."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7, help="narrated videos to time")
    parser.add_argument(
        "--example-repeat", type=int, default=3, help="runs of the example with a title"
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    results = asyncio.run(measure(args.repeat, args.example_repeat))
    print(json.dumps(results, indent=2))
    if args.write:
        write_section("media", COMMAND, section(results))
    sys.exit(0 if met(results) else 1)


if __name__ == "__main__":
    main()
