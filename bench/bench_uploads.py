"""Uploads against a real ``nodeloom serve`` (issue 33): what a large upload costs the server
in memory and how fast it is received, many uploads at once, and how long the ingest of each
kind of media takes.

    .venv/bin/python -m bench.bench_uploads [--large-mb 1024] [--concurrent 100]
        [--image-mb 10] [--video-seconds 60] [--write]

1. **Large upload**: ``--large-mb`` of bytes sent as a raw body, streamed by the client (never
   held whole on either side), to ``POST /api/v1/uploads``. The bytes are not media, so the
   server receives the whole body to disk and then refuses it (415) after reading its first
   bytes: the figure is the receiving path alone, which is what grows with the size (the
   ingest of a video is measured in part 3). Reported: the server process's RSS before and
   the highest sampled while the body streams, and the throughput, beside ``cp`` of a file
   of the same size on the same disk.
   Target (issue 33): RSS grows by < 64 MB; throughput at least half of ``cp``'s.
2. **Concurrent uploads**: ``--concurrent`` distinct PNG images of about ``--image-mb`` each,
   all sent at once (multipart, one connection each): latency p50/p99, errors, wall time.
3. **Ingest by kind**: one upload of each: a 12-megapixel JPEG (becomes a PNG), a 1-minute
   WAV (becomes an MP3), a ``--video-seconds`` 1080p MOV (becomes an H.264/AAC MP4); the
   request's wall time, which is receiving plus the sandboxed decode and conversion.

The account is the owner's (the enterprise plan: 5 GiB files), on a fresh data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
from PIL import Image

from bench.common import Server, make_account, percentile, server, table, write_section

COMMAND = ".venv/bin/python -m bench.bench_uploads --write"
CHUNK = 1024 * 1024
TARGET_RSS_GROWTH_MB = 64


def _body(total: int) -> Iterator[bytes]:
    """``total`` bytes, 1 MiB at a time, none of them media."""
    block = np.random.default_rng(0).integers(0, 256, CHUNK, dtype=np.uint8).tobytes()
    block = b"NOTMEDIA" + block[8:]
    sent = 0
    while sent < total:
        part = block[: min(CHUNK, total - sent)]
        sent += len(part)
        yield part


def _cp_seconds(size: int) -> float:
    """``cp`` of a file of ``size`` bytes on the disk the server writes to, cache dropped
    from the source as far as an unprivileged process can (the copy reads it back)."""
    folder = Path(tempfile.mkdtemp(prefix="nodeloom-cp-"))
    try:
        source = folder / "source"
        with source.open("wb") as out:
            for part in _body(size):
                out.write(part)
        started = time.monotonic()
        subprocess.run(["cp", str(source), str(folder / "copy")], check=True)
        os.sync()
        return time.monotonic() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _RssSampler:
    """The server's RSS (VmRSS, its own process) sampled every 20 ms while it runs."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append(self.srv.rss_mb())

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def large_upload(srv: Server, key: str, size: int) -> list[tuple[str, str]]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"}
    with httpx.Client(base_url=srv.base_url, timeout=600) as http:
        # Warm up the path (and the sandbox's first process) with a small refused body.
        http.post("/api/v1/uploads?name=warm", content=b"NOTMEDIA" * 1000, headers=headers)
        before = srv.rss_mb()
        with _RssSampler(srv) as sampler:
            started = time.monotonic()
            answer = http.post("/api/v1/uploads?name=big.bin", content=_body(size), headers=headers)
            elapsed = time.monotonic() - started
    mb = size / CHUNK
    body = f"{mb:,.0f} MiB, streamed (answer {answer.status_code} {answer.json()['code']})"
    return [("body", body), *rss_and_throughput(before, sampler, mb, elapsed, _cp_seconds(size))]


def rss_and_throughput(
    before: float, sampler: _RssSampler, mb: float, elapsed: float, cp: float
) -> list[tuple[str, str]]:
    """The rows every large-upload table shares: memory against its target, and the
    throughput against ``cp``'s on the same disk (``cp`` seconds for the same size)."""
    highest = max(sampler.samples, default=before)
    growth = highest - before
    return [
        (
            "server RSS before / highest during",
            f"{before:.0f} / {highest:.0f} MB ({len(sampler.samples)} samples, every 20 ms)",
        ),
        (
            "RSS growth",
            f"{growth:.1f} MB ({'met' if growth < TARGET_RSS_GROWTH_MB else 'missed'}: "
            f"< {TARGET_RSS_GROWTH_MB} MB)",
        ),
        ("upload wall time", f"{elapsed:.1f} s, {mb / elapsed:,.0f} MiB/s"),
        ("cp of the same size, same disk", f"{cp:.1f} s, {mb / cp:,.0f} MiB/s"),
        (
            "upload / cp throughput",
            f"{cp / elapsed:.2f} ({'met' if cp / elapsed >= 0.5 else 'missed'}: >= 0.5)",
        ),
    ]


def _png(seed: int, side: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


async def concurrent_uploads(
    srv: Server, key: str, count: int, image_mb: float
) -> list[tuple[str, str]]:
    side = int((image_mb * CHUNK / 3) ** 0.5)
    base = _png(1, side)
    # Distinct files cheaply: the same picture with a different last row, re-encoded once.
    images = []
    pixels = np.asarray(Image.open(io.BytesIO(base))).copy()
    for i in range(count):
        pixels[-1, :, :] = i % 256
        pixels[-1, 0, 0] = i // 256
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG", compress_level=1)
        images.append(buffer.getvalue())
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(
        base_url=srv.base_url, timeout=900, limits=limits, headers=headers
    ) as http:

        async def one(i: int) -> tuple[float, int]:
            started = time.monotonic()
            r = await http.post(
                "/api/v1/uploads", files={"file": (f"image-{i}.png", images[i], "image/png")}
            )
            return time.monotonic() - started, r.status_code

        started = time.monotonic()
        results = await asyncio.gather(*(one(i) for i in range(count)))
        wall = time.monotonic() - started
    latencies = [s for s, _ in results]
    errors = [code for _, code in results if code not in (200, 201)]
    size = statistics.mean(len(i) for i in images) / CHUNK
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return [
        ("uploads", f"{count} distinct PNGs of {side}x{side} ({size:.1f} MiB each), all at once"),
        ("latency p50 / p99 / max", f"{p50:.1f} / {p99:.1f} / {max(latencies):.1f} s"),
        ("errors", f"{len(errors)} {sorted(set(errors)) if errors else ''}".strip()),
        ("wall time", f"{wall:.1f} s ({count * size / wall:,.1f} MiB/s)"),
        ("server peak RSS", f"{srv.peak_rss_mb():.0f} MB"),
    ]


def _jpeg_12mp() -> bytes:
    y, x = np.mgrid[0:3000, 0:4000]
    pixels = np.stack([(x // 16) % 256, (y // 12) % 256, ((x + y) // 28) % 256], axis=-1)
    noise = np.random.default_rng(2).integers(0, 40, pixels.shape)
    buffer = io.BytesIO()
    Image.fromarray((pixels + noise).clip(0, 255).astype(np.uint8)).save(
        buffer, format="JPEG", quality=92
    )
    return buffer.getvalue()


def _audio_frame(samples: np.ndarray, fmt: str, layout: str, rate: int, pts: int) -> Any:
    frame = av.AudioFrame.from_ndarray(samples, format=fmt, layout=layout)
    frame.sample_rate = rate
    frame.pts = pts
    frame.time_base = Fraction(1, rate)
    return frame


def _mux(container: Any, stream: Any, frames: Iterable[Any]) -> None:
    """Every frame encoded and muxed, then the encoder flushed."""
    for frame in frames:
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode(None):
        container.mux(packet)


def _wav(seconds: int, folder: Path) -> bytes:
    path = folder / "voice.wav"
    rate = 44100
    with av.open(str(path), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=rate, layout="mono")
        t = np.arange(rate * seconds) / rate
        samples = (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16)
        frames = (
            _audio_frame(samples[s : s + rate].reshape(1, -1), "s16", "mono", rate, s)
            for s in range(0, len(samples), rate)
        )
        _mux(container, stream, frames)
    return path.read_bytes()


def _mov(seconds: int, folder: Path) -> bytes:
    """A 1080p, 30 fps MOV in MPEG-4 Part 2 (what the ingest must convert to H.264) with
    AAC sound."""
    path = folder / "clip.mov"
    fps = 30
    with av.open(str(path), "w", format="mov") as container:
        video = container.add_stream("mpeg4", rate=fps)
        video.width, video.height, video.pix_fmt = 1920, 1080, "yuv420p"
        video.bit_rate = 8_000_000
        audio = container.add_stream("aac", rate=48000, layout="stereo")
        y, x = np.mgrid[0:1080, 0:1920]

        def picture(i: int) -> Any:
            shade = ((x + i * 8) // 8 % 256).astype(np.uint8)
            rgb = np.stack([shade, (y // 5 % 256).astype(np.uint8), 255 - shade], axis=-1)
            return av.VideoFrame.from_ndarray(rgb, format="rgb24")

        _mux(container, video, (picture(i) for i in range(seconds * fps)))
        rate = 48000

        def sound(second: int) -> Any:
            t = (np.arange(rate) + second * rate) / rate
            tone = (np.sin(2 * np.pi * 330 * t) * 0.2).astype(np.float32)
            return _audio_frame(np.stack([tone, tone]), "fltp", "stereo", rate, second * rate)

        _mux(container, audio, (sound(s) for s in range(seconds)))
    return path.read_bytes()


def ingest_times(srv: Server, key: str, video_seconds: int) -> list[tuple[str, ...]]:
    folder = Path(tempfile.mkdtemp(prefix="nodeloom-media-"))
    try:
        files = [
            ("12-megapixel JPEG (4000x3000)", "photo.jpg", _jpeg_12mp()),
            ("1-minute WAV (44.1 kHz mono)", "voice.wav", _wav(60, folder)),
            (f"{video_seconds}-s 1080p30 MOV (MPEG-4 Part 2 + AAC)", "clip.mov",
             _mov(video_seconds, folder)),
        ]  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows: list[tuple[str, ...]] = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=srv.base_url, timeout=1200, headers=headers) as http:
        for label, name, data in files:
            started = time.monotonic()
            r = http.post("/api/v1/uploads", files={"file": (name, data)})
            elapsed = time.monotonic() - started
            body = r.json()
            if r.status_code in (200, 201):
                became = f"{body['content_type']}, {body['size_bytes'] / CHUNK:.1f} MiB"
            else:
                became = f"refused: {r.status_code} {body.get('code')}: {body.get('detail')}"
            rows.append((label, f"{len(data) / CHUNK:.1f} MiB", became, f"{elapsed:.2f} s"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--large-mb", type=int, default=1024)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--image-mb", type=float, default=10)
    parser.add_argument("--video-seconds", type=int, default=60)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with server() as srv:
        _jwt, key = make_account(srv.base_url)
        large = large_upload(srv, key, args.large_mb * CHUNK)
        print(table(large, ("large upload", "")), flush=True)
        many = asyncio.run(concurrent_uploads(srv, key, args.concurrent, args.image_mb))
        print(table(many, ("concurrent uploads", "")), flush=True)
        ingest = ingest_times(srv, key, args.video_seconds)
        print(table(ingest, ("ingest", "sent", "became", "upload wall time")), flush=True)
    if args.write:
        command = (
            f"{COMMAND} --large-mb {args.large_mb} --concurrent {args.concurrent} "
            f"--image-mb {args.image_mb:g} --video-seconds {args.video_seconds}"
        )
        body = (
            "### Uploads (issue 33)\n\n"
            "A large body streamed to `POST /api/v1/uploads` (raw, not media: the receiving "
            "path alone), many images at once, and one upload of each kind of media "
            "(receiving plus the sandboxed decode and conversion).\n\n"
            + table(large, ("large upload", ""))
            + "\n\n"
            + table(many, ("concurrent uploads", ""))
            + "\n\n"
            + table(ingest, ("ingest", "sent", "became", "upload wall time"))
        )
        write_section("uploads", command, body)


if __name__ == "__main__":
    main()
