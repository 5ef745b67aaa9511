"""Speech synthesis: eSpeak NG through ctypes (local, offline), or a provider.

A run that calls a provider (the configured one, or an account's ``openai`` or
``elevenlabs`` credential; ``TextToSpeech.waits_on_provider``) is a provider adapter
(nodes/adapters/policy.py): it waits on the event loop, holding no sandbox process, and only
the check of the returned MP3 runs in a sandbox process. Local synthesis runs in a sandbox
process, as every computing node does.

eSpeak NG keeps global state (current voice, rate, callback) and is not thread-safe, so every
use goes through ``_LOCK``: one synthesis at a time per process. It is fast (roughly 50x real
time), so the lock costs little. The library and its voice data come from the
``espeakng-loader`` wheel; nothing is downloaded at run time.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import av
import numpy as np
from pydantic import Field

from nodeloom.nodes import elevenlabs, media, providers
from nodeloom.nodes.adapters import policy
from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
    input_text,
)
from nodeloom.settings import Settings

# espeak_ng.h constants
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # report errors instead of calling exit() inside the library
_CHARS_UTF8 = 1
_POS_CHARACTER = 1
_PARAM_RATE = 1
_EE_OK = 0
DEFAULT_RATE = 175  # words per minute at speed 1.0
MIN_RATE, MAX_RATE = 80, 450  # eSpeak's own bounds
MAX_TEXT_CHARS = 100_000
# The longest input OpenAI's /audio/speech takes (it refuses more with 400, and a longer
# text is better split upstream than cut here).
OPENAI_SPEECH_MAX_CHARS = 4096
VOICE_PATTERN = r"^[a-z]{2,3}(-[a-z0-9]{1,8})*(\+[a-z0-9]{1,12})?$"  # "en", "en-us", "de+f3"
# Encoding speech to MP3 costs about 20 times what synthesising it does, and LAME is
# sequential: long speech is cut in pauses and the pieces are encoded on separate cores
# (media.encode_mp3).
MIN_PIECE_SECONDS = 8.0
MAX_PIECES = 4
QUIET_WINDOW = 1024  # samples at 44.1 kHz, 23 ms
QUIET_PEAK = 0.01  # -40 dBFS: eSpeak's pauses are digital silence
PROVIDER_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "cedar",
    "coral",
    "echo",
    "fable",
    "marin",
    "nova",
    "onyx",
    "sage",
    "shimmer",
    "verse",
)


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)
_LOCK = threading.Lock()


@dataclass
class _Engine:
    lib: Any
    sample_rate: int
    callback: Any = None  # keep the ctypes callback alive while the library holds it


_engine: _Engine | None = None


def _load() -> _Engine:
    """Load and initialise the library once per process (caller holds ``_LOCK``)."""
    global _engine
    if _engine is not None:
        return _engine
    import espeakng_loader

    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    lib.espeak_Synth.restype = ctypes.c_int
    data = espeakng_loader.get_data_path().encode()
    rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data, _INITIALIZE_DONT_EXIT)
    if rate <= 0:
        raise NodeFailure("the eSpeak NG speech engine failed to initialise")
    _engine = _Engine(lib=lib, sample_rate=rate)
    return _engine


def synthesize(
    text: str, voice: str, speed: float, max_seconds: float, progress: media.Progress
) -> tuple[np.ndarray[Any, np.dtype[np.int16]], int]:
    """Speak ``text``; returns mono int16 samples and their rate. Blocking: call in a thread."""
    text = text.replace("\x00", "")[:MAX_TEXT_CHARS]
    encoded = text.encode("utf-8") + b"\x00"
    chunks: list[bytes] = []
    state = {"samples": 0, "too_long": False}
    with _LOCK:
        engine = _load()
        limit = int(max_seconds * engine.sample_rate)

        def on_audio(wav: Any, count: int, events: Any) -> int:
            if events and events[0].text_position > 0 and text:
                progress.fraction = min(0.95, events[0].text_position / len(text))
            if wav and count > 0:
                chunks.append(ctypes.string_at(wav, count * 2))
                state["samples"] += count
            if state["samples"] > limit:
                state["too_long"] = True
                return 1  # abort synthesis
            return 1 if progress.cancelled else 0

        engine.callback = _CALLBACK(on_audio)
        engine.lib.espeak_SetSynthCallback(engine.callback)
        if engine.lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
            raise NodeFailure(f"eSpeak NG has no voice {voice!r} (try en, en-us, de, fr, ru)")
        wpm = max(MIN_RATE, min(MAX_RATE, round(DEFAULT_RATE * speed)))
        engine.lib.espeak_SetParameter(_PARAM_RATE, wpm, 0)
        result = engine.lib.espeak_Synth(
            encoded, len(encoded), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
        )
        rate = engine.sample_rate
    if progress.cancelled:
        raise media.Cancelled
    if state["too_long"]:
        raise NodeFailure(f"speech is longer than max_seconds ({max_seconds:g} s)")
    if result != _EE_OK:
        raise NodeFailure(f"eSpeak NG failed to synthesise (error {result})")
    if not chunks:
        raise NodeFailure("the text has nothing speakable in it")
    return np.frombuffer(b"".join(chunks), dtype=np.int16), rate


def to_stereo_44k(samples: np.ndarray[Any, np.dtype[np.int16]], rate: int) -> media.FloatArray:
    """Resample mono int16 speech to the float32 stereo 44.1 kHz every audio path uses."""
    if samples.size == 0:
        return np.zeros((media.CHANNELS, 0), dtype=np.float32)
    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="fltp", layout="stereo", rate=media.SAMPLE_RATE)
    out = [f.to_ndarray() for f in (*resampler.resample(frame), *resampler.resample(None))]
    return np.concatenate(out, axis=1).astype(np.float32, copy=False)


def encoder_pieces(seconds: float) -> int:
    """Into how many pieces to cut speech for encoding: one per core this process may use,
    each at least ``MIN_PIECE_SECONDS`` long (a short clip is not worth a thread)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, min(cores, MAX_PIECES, int(seconds // MIN_PIECE_SECONDS)))


def quiet_cuts(samples: media.FloatArray, pieces: int) -> list[int]:
    """Sample offsets that cut speech into ``pieces`` of about equal length, each in a pause.

    ``media.encode_mp3`` encodes the pieces at once and a join adds a few ms of encoder
    padding, which nobody hears in a pause between words. Each cut is the middle of the
    silent window nearest its ideal place whose neighbours are silent too; where there is no
    pause near it, the speech is not cut there.
    """
    windows = samples.shape[1] // QUIET_WINDOW
    if pieces < 2 or windows < 3 * pieces:
        return []
    peaks = np.abs(samples[0, : windows * QUIET_WINDOW]).reshape(windows, QUIET_WINDOW).max(1)
    # A window counts as loud as its loudest neighbour: the cut needs silence on both sides.
    peaks = np.maximum(peaks, np.maximum(np.roll(peaks, 1), np.roll(peaks, -1)))
    quiet = np.flatnonzero(peaks <= QUIET_PEAK)
    quiet = quiet[(quiet > 0) & (quiet < windows - 1)]  # np.roll wrapped around at the ends
    if not quiet.size:
        return []
    reach = windows // (4 * pieces)  # a quarter of a piece either side
    cuts = []
    for k in range(1, pieces):
        centre = windows * k // pieces
        # Pieces of equal length finish together: the pause nearest the middle wins.
        nearest = int(quiet[np.argmin(np.abs(quiet - centre))])
        if abs(nearest - centre) <= reach:
            cuts.append(nearest * QUIET_WINDOW + QUIET_WINDOW // 2)
    return cuts


class TextToSpeechParams(Params):
    voice: Annotated[str, Field(min_length=2, max_length=40)] = Field(
        default="en",
        description="Local engine: an eSpeak NG voice (en, en-us, de, fr, es, ru, ... with an "
        "optional variant like en+f3). OpenAI: a voice name such as alloy, coral or onyx (a "
        "local voice name falls back to alloy, and an OpenAI voice name to en locally). "
        "ElevenLabs credential: a voice id such as 21m00Tcm4TlvDq8ikWAM (anything else "
        "falls back to that voice).",
    )
    model: str = Field(
        default="",
        max_length=200,
        description="Provider model: e.g. tts-1, tts-1-hd, gpt-4o-mini-tts (OpenAI) or "
        "eleven_multilingual_v2, eleven_flash_v2_5 (ElevenLabs); empty: the configured "
        "OpenAI speech model, or eleven_multilingual_v2. Ignored by the local engine.",
    )
    speed: Annotated[float, Field(ge=0.5, le=2.0)] = Field(
        default=1.0, description="Speaking rate; 1.0 is normal (about 175 words a minute)."
    )
    engine: Literal["auto", "local", "provider"] = Field(
        default="auto", description="auto: the provider when one is configured, else local."
    )
    max_seconds: Annotated[float, Field(gt=0, le=600)] = Field(
        default=120,
        description="Longest speech allowed; the price is estimated (and capped) from it.",
    )
    credential: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="An openai or elevenlabs credential of this account (its id): the "
        "node speaks through that provider with that key; the credential's kind picks the "
        "provider.",
    )


class TextToSpeech(NodeType):
    spec = NodeSpec(
        type="TextToSpeech",
        version=1,
        category="audio",
        title="Text to speech",
        description="Speak text as MP3: local eSpeak NG, the configured provider's voices, or "
        "an account's OpenAI or ElevenLabs credential.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.AUDIO),
        params=TextToSpeechParams,
        cost=Cost(credits=1, per_second=1),
        optional_provider=True,
        adapter=True,  # when it calls a provider (waits_on_provider); local speech: sandboxed
        credential_kinds=("openai", elevenlabs.KIND),
    )

    def waits_on_provider(
        self, params: TextToSpeechParams, settings: Settings, credential_kind: str | None
    ) -> bool:
        """The provider speaks (so the run waits on the event loop) unless the local engine
        is asked for, or chosen by ``auto`` for want of a provider or credential."""
        if params.engine == "local":
            return False
        if credential_kind is not None or params.engine == "provider":
            return True
        return providers.unavailable_reason(settings) is None

    def fingerprint(self, params: TextToSpeechParams, settings: Settings) -> dict[str, Any]:
        """Which engine speaks (and, for the provider, which model) decides the sound."""
        if params.engine == "local" or providers.unavailable_reason(settings):
            return {**super().fingerprint(params, settings), "engine": "local"}
        model = params.model or settings.provider_tts_model
        return {
            **providers.provider_fingerprint(self, params, settings, model),
            "engine": "provider",
        }

    async def run(
        self, ctx: NodeContext, params: TextToSpeechParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = (input_text(inputs) or "").strip()
        if not text:
            raise NodeFailure("there is no text to speak")
        max_seconds = media.length_limit(ctx, params.max_seconds)
        credential = ctx.credential if policy.is_provider_context(ctx) else None
        kind = credential.kind if credential is not None else ctx.credential_kind
        if self.waits_on_provider(params, ctx.settings, kind):  # as the executor decided
            if kind == elevenlabs.KIND:
                return await elevenlabs.speech(
                    ctx, text, params.voice, params.model, params.speed, max_seconds
                )
            if len(text) > OPENAI_SPEECH_MAX_CHARS:
                raise NodeFailure(
                    f"the text to speak is {len(text):,} characters; OpenAI's speech takes "
                    f"at most {OPENAI_SPEECH_MAX_CHARS:,}"
                )
            payload = {
                "model": params.model or ctx.settings.provider_tts_model,
                "input": text,
                "voice": params.voice if params.voice in PROVIDER_VOICES else "alloy",
                "speed": params.speed,
                "response_format": "mp3",
            }
            return await providers.speech(ctx, "/audio/speech", payload, max_seconds)
        path = media.scratch_file(ctx, ".mp3")
        voice = "en" if params.voice in PROVIDER_VOICES else params.voice
        if not re.fullmatch(VOICE_PATTERN, voice):
            raise NodeFailure(f"{voice!r} is not an eSpeak NG voice name")

        def work(progress: media.Progress) -> Produced:
            samples, rate = synthesize(text, voice, params.speed, max_seconds, progress)
            stereo = to_stereo_44k(samples, rate)
            cuts = quiet_cuts(stereo, encoder_pieces(stereo.shape[1] / media.SAMPLE_RATE))
            return media.encode_mp3(stereo, path, ctx.settings, cuts)

        return await media.run_with_progress(ctx, work)


NODES: list[NodeType] = [TextToSpeech()]
