"""ElevenLabs text to speech, against its published HTTP API.

``POST {base_url}/v1/text-to-speech/{voice_id}?output_format=mp3_44100_128`` with the key in
the ``xi-api-key`` header and ``{"text", "model_id"}`` as JSON; the answer is the MP3 itself.
The connection test is ``GET {base_url}/v1/user``, the cheapest authenticated call. Only an
account's ``elevenlabs`` credential reaches it (there is no operator-wide ElevenLabs key), so
every request goes through the SSRF guard. ``TextToSpeech`` calls it as a provider adapter
(nodes/adapters/policy.py): the wait is on the event loop, holding no sandbox process; the
returned MP3 is checked in a sandbox process. Retries on 429/5xx, ``Retry-After`` and error
quoting are those of ``policy.Provider``. See docs/providers.md.
"""

from __future__ import annotations

import re
from typing import Final

from nodeloom.nodes import providers
from nodeloom.nodes.adapters.policy import Credential
from nodeloom.sdk._node import NodeContext, Produced
from nodeloom.settings import Settings

KIND: Final = "elevenlabs"
DEFAULT_URL: Final = "https://api.elevenlabs.io"  # a credential's base_url when it has none
KEY_HEADER: Final = "xi-api-key"
DEFAULT_MODEL: Final = "eleven_multilingual_v2"
# "Rachel", one of the premade voices every ElevenLabs account has: what a TextToSpeech node
# whose voice is not an ElevenLabs voice id (the default "en") speaks with.
DEFAULT_VOICE: Final = "21m00Tcm4TlvDq8ikWAM"
OUTPUT_FORMAT: Final = "mp3_44100_128"
VOICE_ID = re.compile(r"^[A-Za-z0-9]{16,40}$")
MIN_SPEED, MAX_SPEED = 0.7, 1.2  # what its voice_settings.speed accepts


def voice_id(voice: str) -> str:
    """The voice to ask for: ``voice`` when it looks like an ElevenLabs voice id, else the
    default voice (a local voice name such as "en" means nothing there)."""
    return voice if VOICE_ID.fullmatch(voice) else DEFAULT_VOICE


async def speech(
    ctx: NodeContext, text: str, voice: str, model: str, speed: float, max_seconds: float
) -> Produced:
    """``text`` spoken by ``voice`` (an id) with ``model``, through the account's
    ``elevenlabs`` credential the node names, as an MP3 artifact."""
    payload: dict[str, object] = {"text": text, "model_id": model or DEFAULT_MODEL}
    if speed != 1.0:
        payload["voice_settings"] = {"speed": min(MAX_SPEED, max(MIN_SPEED, speed))}
    path = f"/v1/text-to-speech/{voice_id(voice)}?output_format={OUTPUT_FORMAT}"
    return await providers.speech(ctx, path, payload, max_seconds, key_header=KEY_HEADER)


async def check(settings: Settings, credential: Credential) -> tuple[bool, int | None, str]:
    """A credential's connection test: ``GET {base_url}/v1/user``."""
    key = credential.value("api_key") or ""
    url = (credential.value("base_url") or DEFAULT_URL).rstrip("/") + "/v1/user"
    return await providers.check_endpoint(settings, url, {KEY_HEADER: key}, key)
