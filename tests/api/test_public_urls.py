"""The URLs the server hands out (webhook ``url``, artifact ``download_url``, problem
``type``): NODELOOM_BASE_URL when set, else the address the request was sent to; forwarded
headers only from the proxies NODELOOM_FORWARDED_ALLOW_IPS names; and ``nodeloom serve``
warns when the setting's port is not the one it listens on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from fastapi import FastAPI

from nodeloom.api.urls import base_url_mismatch, valid_host
from nodeloom.settings import Settings
from tests.conftest import TEST_SECRET, User, make_user
from tests.live import account
from tests.runs_helpers import create_workflow, execute, g, n, wait_for_run
from tests.server import ServerProcess


async def handed_out(client: httpx.AsyncClient, user: User, **headers: str) -> dict[str, str]:
    """The three kinds of URL, each from a request sent with ``headers``."""
    wf = await create_workflow(client, user, g([n("in", "TextInput", text="hi")], []))
    run = await wait_for_run(client, user, wf, (await execute(client, user, wf)).json()["run_id"])
    artifact_id = run["node_runs"][0]["artifact_id"]
    both = {**user.headers, **headers}
    hook = await client.post(f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}, headers=both)
    assert hook.status_code == 201, hook.text
    listed = await client.get(f"/api/v1/workflows/{wf}/webhooks", headers=both)
    assert listed.json()[0]["url"] == hook.json()["url"]
    meta = await client.get(f"/api/v1/artifacts/{artifact_id}/metadata", headers=both)
    problem = await client.get("/api/v1/workflows/none", headers=both)
    assert problem.status_code == 404
    return {
        "webhook": hook.json()["url"],
        "download": meta.json()["download_url"],
        "problem": problem.json()["type"],
    }


def assert_based_on(urls: dict[str, str], base: str) -> None:
    assert urls["webhook"].startswith(f"{base}/api/v1/webhooks/"), urls
    assert urls["download"].startswith(f"{base}/api/v1/artifacts/"), urls
    assert "sig=" in urls["download"]
    assert urls["problem"] == f"{base}/api/v1/problems/not_found", urls


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"base_url": None}


@pytest.fixture
async def internal(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app reached as http://nodeloom.internal:8123 (the Host header says so)."""
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://nodeloom.internal:8123"
    ) as c:
        yield c


@pytest.fixture
async def user(internal: httpx.AsyncClient) -> User:
    return await make_user(internal, "owner@example.com")


class TestFromTheRequest:
    async def test_unset_setting_uses_the_requests_address(
        self, internal: httpx.AsyncClient, user: User
    ) -> None:
        assert_based_on(await handed_out(internal, user), "http://nodeloom.internal:8123")

    async def test_each_request_gets_its_own_address(
        self, internal: httpx.AsyncClient, user: User
    ) -> None:
        urls = await handed_out(internal, user, Host="10.0.0.5:9000")
        assert_based_on(urls, "http://10.0.0.5:9000")

    async def test_a_host_header_that_is_not_a_host_is_not_used(
        self, internal: httpx.AsyncClient, user: User
    ) -> None:
        urls = await handed_out(internal, user, Host="evil.example/phish?")
        assert_based_on(urls, "http://nodeloom.internal:8123")  # the server's own address

    async def test_forwarded_headers_are_ignored_by_default(
        self, internal: httpx.AsyncClient, user: User
    ) -> None:
        urls = await handed_out(
            internal, user, **{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "x.example"}
        )
        assert_based_on(urls, "http://nodeloom.internal:8123")


class TestConfigured:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"base_url": "https://nodeloom.example.com/"}

    async def test_the_setting_wins_over_the_request(
        self, internal: httpx.AsyncClient, user: User
    ) -> None:
        urls = await handed_out(internal, user, Host="10.0.0.5:9000")
        assert_based_on(urls, "https://nodeloom.example.com")


FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "nodeloom.example.com, p2"}


class TestForwardedFromAListedProxy:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"base_url": None, "forwarded_allow_ips": "10.9.0.0/16, 127.0.0.1"}

    async def test_believed(self, internal: httpx.AsyncClient, user: User) -> None:
        urls = await handed_out(internal, user, **FORWARDED)
        assert_based_on(urls, "https://nodeloom.example.com")


class TestForwardedFromAnyoneElse:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"base_url": None, "forwarded_allow_ips": "10.9.0.0/16"}

    async def test_ignored(self, internal: httpx.AsyncClient, user: User) -> None:
        urls = await handed_out(internal, user, **FORWARDED)  # the peer is 127.0.0.1
        assert_based_on(urls, "http://nodeloom.internal:8123")


class TestForwardedFromAnyPeer:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"base_url": None, "forwarded_allow_ips": "*"}

    async def test_a_forwarded_host_that_is_not_a_host_is_not_used(
        self, internal: httpx.AsyncClient, user: User
    ) -> None:
        urls = await handed_out(
            internal, user, **{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "a/b@c"}
        )
        assert_based_on(urls, "https://nodeloom.internal:8123")


class TestHostHeader:
    @pytest.mark.parametrize(
        "value", ["a", "my_service:8000", "nodeloom.example.com", "[::1]:80", "10.0.0.1:9000"]
    )
    def test_a_host_is_used(self, value: str) -> None:
        assert valid_host(value)

    @pytest.mark.parametrize(
        "value", ["", "evil.example/phish?", "a b", "user@host", "-a", "a:123456", "é.com"]
    )
    def test_anything_else_is_not(self, value: str) -> None:
        assert not valid_host(value)


class TestSetting:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("", None),
            ("  ", None),
            ("https://nodeloom.example.com/", "https://nodeloom.example.com"),
            ("http://127.0.0.1:8123", "http://127.0.0.1:8123"),
        ],
    )
    def test_accepted(self, tmp_path: Path, value: str, expected: str | None) -> None:
        settings = Settings(data_dir=tmp_path, secret_key=TEST_SECRET, base_url=value)  # type: ignore[arg-type]
        assert settings.base_url == expected

    @pytest.mark.parametrize(
        "value", ["nodeloom.example.com", "ftp://x", "http://", "http://h?a=1"]
    )
    def test_refused(self, tmp_path: Path, value: str) -> None:
        with pytest.raises(pydantic.ValidationError):
            Settings(data_dir=tmp_path, secret_key=TEST_SECRET, base_url=value)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("base_url", "port", "warns"),
        [
            (None, 8123, False),
            ("http://127.0.0.1:8123", 8123, False),
            ("http://127.0.0.1:8000", 8123, True),
            ("http://localhost", 8123, True),  # this machine, port 80
            ("http://10.0.0.7:8000", 8123, True),  # an explicit port elsewhere
            ("https://nodeloom.example.com", 8123, False),  # a proxy's usual address
            ("http://0.0.0.0:80", 80, False),
        ],
    )
    def test_start_up_check(self, base_url: str | None, port: int, warns: bool) -> None:
        message = base_url_mismatch(base_url, "127.0.0.1", port)
        assert (message is not None) == warns
        if message is not None:
            assert str(port) in message and str(base_url) in message


# -- a real server -----------------------------------------------------------------------------


def _live_urls(server: ServerProcess) -> dict[str, str]:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        _, key = account(http, "owner@example.com")
        http.headers["Authorization"] = f"Bearer {key}"
        r = http.post(
            "/api/v1/workflows",
            json={"name": "u", "graph_json": g([n("in", "TextInput", text="hi")], [])},
        )
        wf = r.json()["id"]
        run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={}).json()["run_id"]
        run: dict[str, Any] = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
        for _ in range(100):
            if run["status"] != "running":
                break
            run = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
        artifact_id = run["node_runs"][0]["artifact_id"]
        hook = http.post(f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}).json()
        meta = http.get(f"/api/v1/artifacts/{artifact_id}/metadata").json()
        problem = http.get("/api/v1/workflows/none").json()
        # The URL handed out works as given.
        if hook["url"].startswith(server.base_url):
            assert http.post(hook["url"], json={"text": "x"}).status_code == 202
            assert httpx.get(meta["download_url"]).text == "hi"
    return {"webhook": hook["url"], "download": meta["download_url"], "problem": problem["type"]}


@pytest.mark.parametrize(
    ("configured", "warns"),
    [("", False), ("http://127.0.0.1:{other}", True), ("https://nodeloom.example.com", False)],
    ids=["unset", "other-port", "public-name"],
)
def test_real_server(tmp_path: Path, configured: str, warns: bool) -> None:
    server = ServerProcess(tmp_path / "data")
    other = server.port + 1 if server.port < 65535 else server.port - 1
    configured = configured.format(other=other)
    server.extra_env = {"NODELOOM_BASE_URL": configured}
    server.start()
    try:
        urls = _live_urls(server)
    finally:
        server.stop()
    assert_based_on(urls, configured or server.base_url)
    log = server.log_path.read_text(errors="replace")
    warning = f"NODELOOM_BASE_URL is {configured} (port {other}) but this server listens on port "
    assert (warning in log) == warns, log[-2000:]
    assert ("WARNING" in log and "NODELOOM_BASE_URL" in log) == warns
