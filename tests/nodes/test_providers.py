"""Provider-backed nodes against a real fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nodeloom.engine.context import ProviderNodeContext
from nodeloom.nodes import media, providers
from nodeloom.nodes.provider_cli import provider_app
from nodeloom.nodes.providers import LLMText, TextToImage
from nodeloom.nodes.speech import TextToSpeech
from nodeloom.sdk._node import NodeFailure
from nodeloom.settings import Settings
from tests.nodes.conftest import SECRET, Artifacts, FakeServer, make_settings, run_node
from tests.providers.context import provider_context
from tests.server import free_port


@pytest.fixture
async def pctx(provider_settings: Settings, tmp_path: Path) -> ProviderNodeContext:
    """What the executor gives a provider node (they wait on the event loop)."""
    return provider_context(provider_settings, tmp_path / "scratch")


class TestLLMText:
    async def test_chat_completion(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        produced = await run_node(
            LLMText(), pctx, {"system": "be brief"}, {"text": artifacts.text("Bonjour")}
        )
        assert produced.data == b"echo: Bonjour"
        (request,) = provider.requests
        assert request.path == "/v1/chat/completions"
        assert request.headers["Authorization"] == "Bearer sk-test-key"
        body = json.loads(request.body)
        assert body["model"] == "gpt-4o-mini"
        assert body["messages"][0] == {"role": "system", "content": "be brief"}

    async def test_429_then_200_honours_retry_after(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        provider.failures.append((429, {"Retry-After": "1"}))
        start = time.monotonic()
        produced = await run_node(LLMText(), pctx, {}, {"text": artifacts.text("x")})
        assert produced.data == b"echo: x"
        assert len(provider.requests) == 2
        assert time.monotonic() - start >= 0.95  # waited as the server asked

    async def test_500_then_200_backs_off(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        provider.failures.append((500, {}))
        produced = await run_node(LLMText(), pctx, {}, {"text": artifacts.text("y")})
        assert produced.data == b"echo: y"
        assert len(provider.requests) == 2

    async def test_retries_run_out(
        self, tmp_path: Path, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        settings = make_settings(
            tmp_path / "d", provider_base_url=provider.url + "/v1", provider_max_retries=1
        )
        provider.failures.extend([(503, {"Retry-After": "0"})] * 2)
        with pytest.raises(NodeFailure, match="HTTP 503") as info:
            await run_node(
                LLMText(),
                provider_context(settings, tmp_path / "s"),
                {},
                {"text": artifacts.text("z")},
            )
        assert info.value.code == "provider_error"
        assert len(provider.requests) == 2

    async def test_client_error_is_not_retried(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        provider.failures.append((400, {}))
        with pytest.raises(NodeFailure, match=r"refused the request \(HTTP 400\): scripted 400"):
            await run_node(LLMText(), pctx, {}, {"text": artifacts.text("z")})
        assert len(provider.requests) == 1

    async def test_unreachable_provider(self, tmp_path: Path, artifacts: Artifacts) -> None:
        port = free_port()  # a port nobody listens on
        settings = make_settings(
            tmp_path / "d", provider_base_url=f"http://127.0.0.1:{port}/v1", provider_max_retries=1
        )
        with pytest.raises(NodeFailure, match="did not answer after 2 attempts"):
            await run_node(
                LLMText(),
                provider_context(settings, tmp_path / "s"),
                {},
                {"text": artifacts.text("z")},
            )

    async def test_not_configured(self, ctx: media.LocalContext, artifacts: Artifacts) -> None:
        reason = LLMText().unavailable_reason(ctx.settings)
        assert reason and "NODELOOM_PROVIDER_BASE_URL" in reason
        assert LLMText.spec.needs_provider and TextToImage.spec.needs_provider
        assert TextToImage().unavailable_reason(ctx.settings) == reason
        with pytest.raises(NodeFailure, match="no AI provider is configured"):
            await run_node(LLMText(), ctx, {}, {"text": artifacts.text("z")})


class TestTextToImage:
    async def test_b64_png(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        produced = await run_node(
            TextToImage(), pctx, {"size": "512x512"}, {"text": artifacts.text("a fox")}
        )
        assert (produced.width, produced.height) == (40, 30)
        assert produced.path is not None  # checked, in a sandbox process in the server
        assert produced.path.read_bytes().startswith(b"\x89PNG")
        body = json.loads(provider.requests[0].body)
        assert body == {"model": "gpt-image-1", "prompt": "a fox", "n": 1, "size": "512x512"}

    async def test_dall_e_asks_for_b64(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        await run_node(TextToImage(), pctx, {"model": "dall-e-3"}, {"text": artifacts.text("x")})
        assert json.loads(provider.requests[0].body)["response_format"] == "b64_json"


class TestProviderSpeech:
    async def test_provider_engine(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        produced = await run_node(
            TextToSpeech(), pctx, {"voice": "en", "speed": 1.5}, {"text": artifacts.text("Hi")}
        )
        assert produced.duration_ms is not None and 400 <= produced.duration_ms <= 700
        body = json.loads(provider.requests[0].body)
        assert body == {
            "model": "tts-1",
            "input": "Hi",
            "voice": "alloy",
            "speed": 1.5,
            "response_format": "mp3",
        }

    async def test_local_engine_can_be_forced(
        self, pctx: ProviderNodeContext, provider: FakeServer, artifacts: Artifacts
    ) -> None:
        await run_node(TextToSpeech(), pctx, {"engine": "local"}, {"text": artifacts.text("Hi")})
        assert provider.requests == []

    async def test_provider_engine_without_provider(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="no AI provider"):
            await run_node(
                TextToSpeech(), ctx, {"engine": "provider"}, {"text": artifacts.text("x")}
            )


class TestKeyFile:
    def test_set_key_stores_it_encrypted(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: FakeServer
    ) -> None:
        data_dir = tmp_path / "cli"
        monkeypatch.setenv("NODELOOM_DATA_DIR", str(data_dir))
        monkeypatch.setenv("NODELOOM_SECRET_KEY", SECRET)
        monkeypatch.delenv("NODELOOM_PROVIDER_API_KEY", raising=False)
        result = CliRunner().invoke(provider_app, ["set-key"], input="sk-from-stdin\n")
        assert result.exit_code == 0, result.output
        path = data_dir / "provider_key.enc"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert b"sk-from-stdin" not in path.read_bytes()
        settings = make_settings(data_dir, provider_base_url=provider.url + "/v1")
        assert providers.api_key(settings) == "sk-from-stdin"
        status = CliRunner().invoke(provider_app, ["status"])
        assert "provider_key.enc" in status.output and "sk-from" not in status.output

    def test_setting_wins_over_file(self, tmp_path: Path) -> None:
        settings = make_settings(tmp_path / "d", provider_api_key="sk-env")
        assert providers.api_key(settings) == "sk-env"
        assert providers.api_key(make_settings(tmp_path / "e")) is None

    async def test_key_file_is_used_for_requests(
        self,
        tmp_path: Path,
        provider: FakeServer,
        artifacts: Artifacts,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        data_dir = tmp_path / "cli2"
        monkeypatch.setenv("NODELOOM_DATA_DIR", str(data_dir))
        monkeypatch.setenv("NODELOOM_SECRET_KEY", SECRET)
        CliRunner().invoke(provider_app, ["set-key"], input="sk-file\n")
        settings = make_settings(data_dir, provider_base_url=provider.url + "/v1")
        await run_node(
            LLMText(),
            media.LocalContext(settings, tmp_path / "s"),
            {},
            {"text": artifacts.text("q")},
        )
        assert provider.requests[0].headers["Authorization"] == "Bearer sk-file"
