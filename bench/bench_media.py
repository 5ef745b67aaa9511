"""Media benchmark: a 200-word narrated 1280x720 video (TextToSpeech -> RenderText 1280x720
-> ImageAudioToVideo) and RenderText 1024x1024, run through the real node code with
``media.LocalContext``. Prints wall times and the process's peak RSS.

    .venv/bin/python bench/bench_media.py

Targets: narrated video < 10 s wall and < 500 MB peak RSS; RenderText 1024x1024 < 300 ms.
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nodeloom.nodes import media
from nodeloom.nodes.base import CONTENT_TYPES, Kind, Produced
from nodeloom.nodes.image import RenderText, RenderTextParams
from nodeloom.nodes.speech import TextToSpeech, TextToSpeechParams
from nodeloom.nodes.video import ImageAudioToVideo, ImageAudioToVideoParams
from nodeloom.settings import Settings

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


async def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings = Settings(data_dir=root / "data", secret_key="b" * 40)
        ctx = media.LocalContext(settings, root / "scratch")
        store = root / "artifacts"
        text = media.store_locally(
            Produced.text(two_hundred_words()), CONTENT_TYPES[Kind.TEXT], store
        )
        tts, render, video = TextToSpeech(), RenderText(), ImageAudioToVideo()

        start = time.perf_counter()
        speech = await tts.run(ctx, TextToSpeechParams(max_seconds=300), {"text": text})
        t_speech = time.perf_counter()
        audio = media.store_locally(speech, CONTENT_TYPES[Kind.AUDIO], store)
        picture = await render.run(ctx, RenderTextParams(width=1280, height=720), {"text": text})
        t_render = time.perf_counter()
        image = media.store_locally(picture, CONTENT_TYPES[Kind.IMAGE], store)
        produced = await video.run(
            ctx,
            ImageAudioToVideoParams(max_seconds=300),
            {"image": image, "audio": audio},
        )
        end = time.perf_counter()
        size = produced.path.stat().st_size if produced.path else 0

        render_times = []
        params = RenderTextParams()
        for _ in range(5):
            t0 = time.perf_counter()
            await render.run(ctx, params, {"text": text})
            render_times.append(time.perf_counter() - t0)

    return {
        "narrated_video_wall_s": round(end - start, 3),
        "  speech_s": round(t_speech - start, 3),
        "  render_720p_s": round(t_render - t_speech, 3),
        "  video_encode_s": round(end - t_render, 3),
        "video_seconds": (produced.duration_ms or 0) / 1000,
        "video_mb": round(size / 1e6, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "render_text_1024_median_ms": round(statistics.median(render_times) * 1000, 1),
    }


if __name__ == "__main__":
    results = asyncio.run(main())
    print(json.dumps(results, indent=2))
    ok = (
        results["narrated_video_wall_s"] < 10
        and results["peak_rss_mb"] < 500
        and results["render_text_1024_median_ms"] < 300
    )
    sys.exit(0 if ok else 1)
