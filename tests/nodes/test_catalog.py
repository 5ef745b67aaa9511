"""Walk the WHOLE registry: every node type runs on small inputs and its output is decoded
with Pillow / PyAV to check the content type, dimensions and duration it claims."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import pytest
from PIL import Image

from nodeloom.nodes import media
from nodeloom.nodes.adapters.policy import Credential
from nodeloom.nodes.registry import build_registry, params_schema
from nodeloom.sdk._node import InputValue, Kind, NodeType, Produced
from nodeloom.settings import Settings
from tests.comfyui_fake import (
    AUDIO_SECONDS,
    AUDIO_WORKFLOW,
    SDXL_WORKFLOW,
    VIDEO_FPS,
    VIDEO_FRAMES,
    VIDEO_SIZE,
    VIDEO_WORKFLOW,
    FakeComfyUI,
    running,
)
from tests.nodes.conftest import Artifacts, FakeServer, make_settings, run_node
from tests.providers.context import provider_context
from tests.providers.fakes import FAL_KEY, REPLICATE_TOKEN, FakeFal, FakeReplicate


@dataclass
class Case:
    params: dict[str, Any]
    inputs: dict[str, InputValue]
    size: tuple[int, int] | None = None  # expected image/video size
    seconds: float | None = None  # expected audio/video length
    text: str | None = None  # expected text output
    sound: bool = False  # video has an audio track
    audio_codec: str = "aac"  # of that track: an MP3 input is copied as it is
    credential: str | None = None  # a provider node's credential kind (tests/providers/fakes)


CaseFactory = Callable[[Artifacts, FakeServer], Case]
# What the fake provider's transcription (tests/fakes.py) becomes as WebVTT.
TRANSCRIPT_VTT = (
    "WEBVTT\n\n1\n00:00:00.000 --> 00:00:00.200\nHello there.\n\n"
    "2\n00:00:00.320 --> 00:00:00.500\nGeneral Kenobi.\n"
)


def _hosted_cases() -> dict[str, CaseFactory]:
    """The Replicate and fal nodes, against the fakes of tests/providers/fakes.py: the model
    name picks what the fake returns (FAKE_OUTPUTS)."""
    text = {"bindings": {"prompt": "text"}}
    cases: dict[str, CaseFactory] = {}
    for provider, prefix, image_model in (
        ("replicate", "ReplicateModel", "acme/img"),
        ("fal", "FalModel", "fal-ai/img"),
    ):
        models = {"": image_model, "Video": "acme/vid", "Audio": "acme/aud", "Text": "acme/txt"}
        if provider == "fal":
            models = {k: "fal-ai/" + v.split("/")[1] for k, v in models.items()}
        expect: dict[str, dict[str, Any]] = {
            "": {"size": (40, 30)},
            "Video": {"size": (64, 48), "seconds": 2.0},
            "Audio": {"seconds": 1.0},
            "Text": {"text": "Once upon a time"},
        }
        for suffix, model in models.items():
            cases[prefix + suffix] = lambda a, s, m=model, p=provider, x=expect[suffix]: Case(
                {"credential": "cred", "model": m, **text},
                {"text": a.text("a fox")},
                credential=p,
                **x,
            )
    cases["TextToVideo"] = lambda a, s: Case(
        {"credential": "cred", "model": "acme/vid", "duration_seconds": 5},
        {"text": a.text("waves")},
        size=(64, 48),
        seconds=2.0,
        credential="replicate",
    )
    cases["ImageToVideo"] = lambda a, s: Case(
        {"credential": "cred", "model": "fal-ai/vid"},
        {"image": a.image()},
        size=(64, 48),
        seconds=2.0,
        credential="fal",
    )
    cases["TextToMusic"] = lambda a, s: Case(
        {"credential": "cred", "model": "fal-ai/wav", "duration_seconds": 3},
        {"text": a.text("lofi")},
        seconds=1.0,
        credential="fal",
    )
    return cases


def _cases() -> dict[str, CaseFactory]:
    return {
        **_hosted_cases(),
        "TextInput": lambda a, s: Case({"text": "fixed"}, {}, text="fixed"),
        "TextTemplate": lambda a, s: Case(
            {"template": "<{{ text }}>"}, {"text": a.text("x")}, text="<x>"
        ),
        "Delay": lambda a, s: Case({"seconds": 0}, {"text": a.text("same")}, text="same"),
        "TextTransform": lambda a, s: Case(
            {"operation": "upper"}, {"text": a.text("éte")}, text="ÉTE"
        ),
        "TextJoin": lambda a, s: Case(
            {"separator": "+"}, {"texts": [a.text("a"), a.text("b")]}, text="a+b"
        ),
        "TextSplit": lambda a, s: Case(
            {"separator": ",", "index": -1}, {"text": a.text("a, b, c")}, text="c"
        ),
        "JsonExtract": lambda a, s: Case(
            {"expression": "items[1].name"},
            {"text": a.text('{"items": [{"name": "x"}, {"name": "y"}]}')},
            text="y",
        ),
        "WordCount": lambda a, s: Case({}, {"text": a.text("one two three")}, text="3"),
        "ParseJson": lambda a, s: Case(
            {}, {"text": a.text('```json\n{"a": [1, 2]}\n```')}, text='{"a":[1,2]}'
        ),
        "JsonBuild": lambda a, s: Case(
            {"template": '{"said": {{ text | tojson }}, "n": {{ json.n if json else 0 }}}'},
            {"text": a.text('{"n": 3}')},
            text='{"said":"{\\"n\\": 3}","n":3}',
        ),
        "If": lambda a, s: Case(
            {"operator": "matches", "value": "^urgent"},
            {"text": a.text("urgent: fix")},
            text="urgent: fix",
        ),
        "Switch": lambda a, s: Case(
            {"cases": [{"name": "big", "operator": "gt", "value": 10, "path": "n"}]},
            {"text": a.text('{"n": 12}')},
            text='{"n": 12}',
        ),
        "Merge": lambda a, s: Case(
            {"mode": "all"}, {"inputs": [a.text("x"), a.text("y")]}, text='["x", "y"]'
        ),
        "HttpRequest": lambda a, s: Case(
            {"url": s.url + "/hello"}, {}, text="héllo wörld — привет"
        ),
        "LLMText": lambda a, s: Case({}, {"text": a.text("hi")}, text="echo: hi"),
        "TextToImage": lambda a, s: Case({"size": "256x256"}, {"text": a.text("a cat")}, (40, 30)),
        "ComfyUIWorkflow": lambda a, s: Case(
            {
                "workflow": SDXL_WORKFLOW,
                "bindings": [{"source": "text1", "node": "6", "input": "text", "type": "text"}],
                "credential": "c1",
            },
            {"text1": a.text("a cat")},
            (96, 64),
            credential="comfyui",
        ),
        "ComfyUIWorkflowVideo": lambda a, s: Case(
            {"workflow": VIDEO_WORKFLOW, "credential": "c1"},
            {},
            VIDEO_SIZE,
            seconds=VIDEO_FRAMES / VIDEO_FPS,
            credential="comfyui",
        ),
        "ComfyUIWorkflowAudio": lambda a, s: Case(
            {"workflow": AUDIO_WORKFLOW, "credential": "c1"},
            {},
            seconds=AUDIO_SECONDS,
            credential="comfyui",
        ),
        "RenderText": lambda a, s: Case(
            {"width": 120, "height": 80}, {"text": a.text("Hello")}, (120, 80)
        ),
        "ImageResize": lambda a, s: Case(
            {"width": 32, "height": 20}, {"image": a.image()}, (32, 20)
        ),
        "ImageThumbnail": lambda a, s: Case({"max_size": 32}, {"image": a.image()}, (32, 24)),
        "ImageCrop": lambda a, s: Case(
            {"left": 10, "top": 5, "width": 100, "height": 20}, {"image": a.image()}, (54, 20)
        ),
        "ImageRotate": lambda a, s: Case({"degrees": 90}, {"image": a.image()}, (48, 64)),
        "ImageFilter": lambda a, s: Case({"filter": "sepia"}, {"image": a.image()}, (64, 48)),
        "ImageCaption": lambda a, s: Case(
            {}, {"image": a.image(), "text": a.text("Ça va? Да!")}, (64, 48)
        ),
        "ImageGrid": lambda a, s: Case(
            {"cell_width": 20, "cell_height": 10, "gap": 2},
            {"images": [a.image(), a.image(color="red"), a.image(color="green")]},
            (2 * 20 + 3 * 2, 2 * 10 + 3 * 2),
        ),
        "CollectImages": lambda a, s: Case(
            {"cell_width": 20, "cell_height": 10, "gap": 2, "columns": 2},
            # None: an item that did not complete is left out of the grid.
            {"images": [a.image(), None, a.image(color="green")]},  # type: ignore[list-item]
            (2 * 20 + 3 * 2, 1 * 10 + 2 * 2),
        ),
        "ForEach": lambda a, s: Case({}, {"text": a.text("a\n\n b \nc")}, text='["a", "b", "c"]'),
        "Collect": lambda a, s: Case(
            {},
            {"items": [a.text("x"), None, a.text("é")]},  # type: ignore[list-item]
            text='["x", null, "é"]',
        ),
        "Repeat": lambda a, s: Case({"max_iterations": 2}, {"text": a.text("start")}, text="start"),
        "Until": lambda a, s: Case(
            {"operator": "gte", "value": 7, "path": "score"},
            {"text": a.text('{"score": 8}')},
            text='{"score": 8}',
        ),
        "GradientBackground": lambda a, s: Case({"width": 30, "height": 20}, {}, (30, 20)),
        "ToneGenerator": lambda a, s: Case({"seconds": 0.4}, {}, seconds=0.4),
        "AudioConcat": lambda a, s: Case(
            {"gap_seconds": 0.1}, {"audio": [a.audio(0.3), a.audio(0.2, 660)]}, seconds=0.6
        ),
        "AudioTrim": lambda a, s: Case(
            {"start": 0.1, "duration": 0.2}, {"audio": a.audio(0.5)}, seconds=0.2
        ),
        "AudioVolume": lambda a, s: Case(
            {"gain_db": -6, "fade_in": 0.1, "fade_out": 0.1}, {"audio": a.audio(0.5)}, seconds=0.5
        ),
        "VideoSound": lambda a, s: Case({}, {"video": a.video(0.5)}, seconds=0.5),
        "TextToSpeech": lambda a, s: Case(
            {"engine": "local"}, {"text": a.text("Hello there.")}, seconds=None
        ),
        "ImageAudioToVideo": lambda a, s: Case(
            {"fps": 10},
            {"image": a.image(63, 47), "audio": a.audio(0.5)},
            (62, 46),
            0.5,
            sound=True,
            audio_codec="mp3",
        ),
        "Slideshow": lambda a, s: Case(
            {"width": 64, "height": 48, "fps": 10, "durations": [0.3, 0.4], "crossfade": 0.1},
            {"images": [a.image(), a.image(color="red")], "audio": a.audio(0.2)},
            (64, 48),
            0.7,
            sound=True,
        ),
        "KenBurns": lambda a, s: Case(
            {"seconds": 0.5, "width": 64, "height": 48, "fps": 10, "pan": "right"},
            {"image": a.image(80, 80)},
            (64, 48),
            0.5,
        ),
        "VideoConcat": lambda a, s: Case(
            {"fps": 10},
            {"videos": [a.video(0.5), a.video(0.3, (32, 32), sound=False)]},
            (64, 48),
            0.8,
            sound=True,
        ),
        "CollectVideos": lambda a, s: Case(
            {"fps": 10},
            {"videos": [a.video(0.5), None, a.video(0.3, sound=False)]},  # type: ignore[list-item]
            (64, 48),
            0.8,
            sound=True,
        ),
        "VideoAddAudio": lambda a, s: Case(
            {"fps": 10, "mode": "mix"},
            {"video": a.video(0.5), "audio": a.audio(0.3)},
            (64, 48),
            0.5,
            sound=True,
        ),
        "VideoCaption": lambda a, s: Case(
            {"fps": 10},
            {"video": a.video(0.5), "text": a.text("Привет")},
            (64, 48),
            0.5,
            sound=True,
        ),
        "ImageToImage": lambda a, s: Case(
            {}, {"image": a.image(), "text": a.text("blue"), "mask": a.image(20, 20)}, (64, 48)
        ),
        "SpeechToText": lambda a, s: Case({}, {"audio": a.audio(0.5)}, text=TRANSCRIPT_VTT),
        "Captions": lambda a, s: Case(
            {"fps": 10},
            {"video": a.video(0.5), "text": a.text(TRANSCRIPT_VTT)},
            (64, 48),
            0.5,
            sound=True,
        ),
    }


CASES = _cases()


# Node types whose output is another run's (the engine starts a child run for them), so they
# cannot run alone here: tests/api/test_subworkflows.py runs them through the API.
# Waited for by the engine: tests/api/test_subworkflows.py and tests/api/test_approvals.py.
RUN_BY_THE_ENGINE = {"Workflow", "Approval"}
# Media inputs output a file the account already stored, found in the database by id:
# tests/api/test_media_inputs.py runs them through the API.
READ_FROM_THE_DATABASE = {"ImageInput", "AudioInput", "VideoInput"}


def test_every_registered_type_has_a_case() -> None:
    registered = (
        {node.spec.type for node in build_registry()} - RUN_BY_THE_ENGINE - READ_FROM_THE_DATABASE
    )
    assert registered - CASES.keys() == set(), "add a Case for each new node type"
    assert CASES.keys() - registered == set()
    assert len(registered) >= 20


FAKE_OUTPUTS = {"img": "image", "vid": "video", "aud": "audio", "txt": "text", "wav": "wav"}


@pytest.fixture(scope="module")
def comfyui_url() -> Iterator[str]:
    """A fake ComfyUI server (tests/comfyui_fake.py): the account's own, as a credential
    names it."""
    with running(FakeComfyUI(steps=2, step_seconds=0.01)) as comfy:
        yield comfy.url


@pytest.fixture(scope="module")
def hosted_fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Fakes of Replicate's and fal's APIs: (Replicate API URL, fal queue URL)."""
    directory = tmp_path_factory.mktemp("hosted")
    replicate, fal = FakeReplicate(directory), FakeFal(directory)
    replicate.script.by_model = fal.script.by_model = FAKE_OUTPUTS
    fal.script.by_model = {**FAKE_OUTPUTS, "img": "jpeg"}  # fal answers JPEG: made PNG
    try:
        yield replicate.url + "/v1", fal.url
    finally:
        replicate.stop()
        fal.stop()


@pytest.fixture
def catalog_settings(
    tmp_path: Path, provider: FakeServer, hosted_fakes: tuple[str, str]
) -> Settings:
    return make_settings(
        tmp_path / "data",
        provider_base_url=provider.url + "/v1",
        provider_api_key="sk-test",
        http_allowlist=["127.0.0.1"],
        replicate_api_url=hosted_fakes[0],
        fal_queue_url=hosted_fakes[1],
    )


def _credential(kind: str, comfyui_url: str) -> Credential:
    if kind == "comfyui":
        return Credential(id="cred", kind=kind, fields={"base_url": comfyui_url}, secret={})
    secret = {"api_token": REPLICATE_TOKEN} if kind == "replicate" else {"api_key": FAL_KEY}
    return Credential(id="cred", kind=kind, fields={}, secret=secret)


@pytest.mark.parametrize("type_name", sorted(CASES))
async def test_node_type_produces_a_real_file(
    type_name: str,
    catalog_settings: Settings,
    tmp_path: Path,
    artifacts: Artifacts,
    site: FakeServer,
    comfyui_url: str,
) -> None:
    node = build_registry().get(type_name)
    assert node is not None
    case = CASES[type_name](artifacts, site)
    ctx: Any = media.LocalContext(catalog_settings, tmp_path / "scratch")
    params = node.spec.params.model_validate(case.params)
    if node.waits_on_provider(params, catalog_settings, case.credential):
        credential = None  # the operator's provider (catalog_settings)
        if case.credential is not None:
            assert case.credential in node.spec.credential_kinds
            credential = _credential(case.credential, comfyui_url)
        ctx = provider_context(catalog_settings, tmp_path / "scratch", credential)
    assert node.unavailable_reason(catalog_settings) is None
    produced = await run_node(node, ctx, case.params, case.inputs)
    _check_output(node, produced, case)
    _check_pricing(node, case, produced)
    params_schema(node.spec.params)  # the published schema builds


def _content(produced: Produced) -> bytes:
    if produced.path is not None:
        return produced.path.read_bytes()
    assert produced.data is not None
    return produced.data


def _check_output(node: NodeType, produced: Produced, case: Case) -> None:
    data = _content(produced)
    kind = node.spec.output.kind
    if kind in (Kind.TEXT, Kind.JSON):
        text = data.decode("utf-8")
        if case.text is not None:
            assert text == case.text
        return
    if kind is Kind.IMAGE:
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "PNG"
            assert (produced.width, produced.height) == image.size
            if case.size:
                assert image.size == case.size
        return
    with av.open(io.BytesIO(data)) as container:
        assert container.duration is not None
        seconds = container.duration / av.time_base
        assert produced.duration_ms is not None
        assert abs(produced.duration_ms / 1000 - seconds) < 0.05
        if case.seconds is not None:
            assert abs(seconds - case.seconds) < 0.15, seconds
        if kind is Kind.AUDIO:
            assert container.format.name == "mp3"
            assert container.streams.audio[0].codec_context.codec.canonical_name == "mp3"
            assert seconds > 0.1
            return
        assert "mp4" in container.format.name
        video = container.streams.video[0].codec_context
        assert (video.name, video.pix_fmt) == ("h264", "yuv420p")
        assert (produced.width, produced.height) == (video.width, video.height)
        assert video.width % 2 == 0 and video.height % 2 == 0
        if case.size:
            assert (video.width, video.height) == case.size
        assert bool(container.streams.audio) == case.sound
        if case.sound:
            assert container.streams.audio[0].codec_context.codec.canonical_name == (
                case.audio_codec
            )
        frames = sum(1 for _ in container.decode(video=0))
        assert frames >= 1


def _check_pricing(node: NodeType, case: Case, produced: Produced) -> None:
    params = node.spec.params.model_validate(case.params)
    estimate = node.estimate_credits(params)
    charge = node.charge_credits(params, produced.duration_ms)
    assert 0 <= charge <= estimate
    if node.spec.output.kind in (Kind.AUDIO, Kind.VIDEO):
        assert node.spec.cost.per_second > 0
        assert node.estimate_seconds(params) * 1000 >= (produced.duration_ms or 0)


def test_docs_are_current() -> None:
    """docs/nodes.md is generated from the registry; regenerate with scripts/gen_node_docs.py."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "gen_node_docs", root / "scripts" / "gen_node_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (root / "docs" / "nodes.md").read_text(encoding="utf-8") == module.render(), (
        "run: .venv/bin/python scripts/gen_node_docs.py"
    )
