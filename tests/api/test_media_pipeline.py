"""Issue 5's user story over HTTP: a sentence becomes a narrated video (TextInput ->
RenderText + TextToSpeech -> ImageAudioToVideo) that a browser can play."""

from __future__ import annotations

import io

import av
import httpx
from PIL import Image

from tests.conftest import User
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run

SENTENCE = "Nodeloom turns one sentence into a narrated video."


async def test_sentence_to_narrated_video(client: httpx.AsyncClient, owner: User) -> None:
    graph = g(
        [
            n("in", "TextInput"),
            n("card", "RenderText", width=640, height=360, background="#102030", color="#ffffff"),
            n("voice", "TextToSpeech", voice="en", speed=1.0, max_seconds=30),
            n("video", "ImageAudioToVideo", fps=10, max_seconds=30),
        ],
        [
            e("in", "card"),
            e("in", "voice"),
            e("card", "video", "image"),
            e("voice", "video", "audio"),
        ],
    )
    wf = await create_workflow(client, owner, graph)
    r = await execute(client, owner, wf, {"input": {"text": SENTENCE}})
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, wf, r.json()["run_id"], timeout=90)
    assert run["status"] == "completed", run
    arts = {nr["node_id"]: nr["artifact_id"] for nr in run["node_runs"]}

    meta = {}
    for node_id, art in arts.items():
        m = await client.get(f"/api/v1/artifacts/{art}/metadata", headers=owner.headers)
        assert m.status_code == 200
        meta[node_id] = m.json()
    assert meta["card"]["content_type"] == "image/png"
    assert (meta["card"]["width"], meta["card"]["height"]) == (640, 360)
    assert meta["voice"]["content_type"] == "audio/mpeg" and meta["voice"]["duration_ms"] > 1000
    assert meta["video"]["content_type"] == "video/mp4"

    png = (await client.get(f"/api/v1/artifacts/{arts['card']}", headers=owner.headers)).content
    image = Image.open(io.BytesIO(png))
    assert image.size == (640, 360) and len(image.convert("L").getcolors(256) or []) > 2

    mp4 = await client.get(f"/api/v1/artifacts/{arts['video']}", headers=owner.headers)
    assert mp4.headers["content-type"] == "video/mp4"
    with av.open(io.BytesIO(mp4.content)) as container:
        video = container.streams.video[0]
        audio = container.streams.audio[0]
        assert video.codec_context.name == "h264" and video.codec_context.pix_fmt == "yuv420p"
        assert audio.codec_context.codec.canonical_name == "mp3"  # the speech, copied
        assert (video.codec_context.width, video.codec_context.height) == (640, 360)
        assert container.duration is not None
        seconds = container.duration / av.time_base
        times = [float(frame.time) for frame in container.decode(video=0)]
    speech_seconds = meta["voice"]["duration_ms"] / 1000
    assert abs(seconds - speech_seconds) < 0.3, (seconds, speech_seconds)
    # The still is held: one frame a second, the last one lasting to the end.
    assert times == list(range(len(times))) and len(times) - 1 < seconds <= len(times)
    # faststart: the moov atom precedes the media data so playback starts before download ends
    assert mp4.content.find(b"moov") < mp4.content.find(b"mdat")
    # Every credit accounted: flat + per started second, never above the estimate.
    assert 0 < run["credits_used"] <= run["estimated_credits"]
