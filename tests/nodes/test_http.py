"""HttpRequest and its SSRF guard, against real servers on 127.0.0.1."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from nodeloom.nodes import media
from nodeloom.nodes.http import Allowlist, BlockedAddress, HttpRequest, fetch, is_public
from nodeloom.sdk._node import NodeFailure
from tests.nodes.conftest import Artifacts, FakeServer, make_settings, run_node


def _ctx(tmp_path: Path, **overrides: object) -> media.LocalContext:
    return media.LocalContext(make_settings(tmp_path / "data", **overrides), tmp_path / "scratch")


class TestAddressRules:
    @pytest.mark.parametrize(
        "address",
        [
            "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0",
            "100.64.0.1", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
            "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1",
            "2002:7f00:1::",
        ],
    )  # fmt: skip
    def test_non_public_addresses(self, address: str) -> None:
        assert not is_public(ipaddress.ip_address(address))

    @pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
    def test_public_addresses(self, address: str) -> None:
        assert is_public(ipaddress.ip_address(address))

    def test_allowlist_hosts_and_cidrs(self, tmp_path: Path) -> None:
        settings = make_settings(tmp_path, http_allowlist=["Intranet.Example", "10.0.0.0/8", "::1"])
        allow = Allowlist.from_settings(settings)
        assert allow.names("intranet.example.")
        assert allow.contains(ipaddress.ip_address("10.9.8.7"))
        assert allow.contains(ipaddress.ip_address("::ffff:10.9.8.7"))
        assert allow.contains(ipaddress.ip_address("::1"))
        assert not allow.contains(ipaddress.ip_address("127.0.0.1"))


class TestRefused:
    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://localhost/",  # a name that resolves to a loopback address
            "http://0.0.0.0/",
        ],
    )
    async def test_private_targets(self, url: str, tmp_path: Path) -> None:
        with pytest.raises(BlockedAddress, match="refusing to connect"):
            await run_node(HttpRequest(), _ctx(tmp_path), {"url": url})

    async def test_private_target_with_live_server_is_never_contacted(
        self, tmp_path: Path, site: FakeServer
    ) -> None:
        with pytest.raises(BlockedAddress):
            await run_node(HttpRequest(), _ctx(tmp_path), {"url": site.url + "/hello"})
        assert site.requests == []

    async def test_redirect_to_private_address(self, tmp_path: Path, site: FakeServer) -> None:
        """The allow-listed server redirects to addresses that are not allowed."""
        ctx = _ctx(tmp_path, http_allowlist=["127.0.0.1/32"])
        for target in (
            "http://169.254.169.254/latest/meta-data/",
            "http://10.0.0.1/",
            f"http://[::1]:{site.port}/hello",
        ):
            with pytest.raises(BlockedAddress):
                await run_node(HttpRequest(), ctx, {"url": f"{site.url}/redirect?to={target}"})
        assert [r.path.split("?")[0] for r in site.requests] == ["/redirect"] * 3

    @pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/", "gopher://x/"])
    async def test_other_schemes(self, url: str, tmp_path: Path) -> None:
        with pytest.raises(NodeFailure, match="only http and https"):
            await run_node(HttpRequest(), _ctx(tmp_path), {"url": url})

    def test_param_check_rejects_other_schemes(self) -> None:
        params = HttpRequest.spec.params.model_validate({"url": "file:///etc/passwd"})
        assert HttpRequest().param_problems(params)


class TestAllowed:
    async def test_allowlisted_server_is_fetched(self, tmp_path: Path, site: FakeServer) -> None:
        ctx = _ctx(tmp_path, http_allowlist=["127.0.0.1"])
        produced = await run_node(HttpRequest(), ctx, {"url": site.url + "/hello"})
        assert produced.data is not None
        assert produced.data.decode() == "héllo wörld — привет"

    async def test_allowlisted_by_name_keeps_host_header(
        self, tmp_path: Path, site: FakeServer
    ) -> None:
        ctx = _ctx(tmp_path, http_allowlist=["localhost"])
        produced = await run_node(
            HttpRequest(),
            ctx,
            {"url": f"http://localhost:{site.port}/echo", "method": "POST", "body": "payload"},
        )
        assert produced.data is not None
        echoed = json.loads(produced.data)
        assert echoed == {"method": "POST", "body": "payload", "host": f"localhost:{site.port}"}

    async def test_body_input_and_json_output(
        self, tmp_path: Path, site: FakeServer, artifacts: Artifacts
    ) -> None:
        ctx = _ctx(tmp_path, http_allowlist=["127.0.0.1"])
        produced = await run_node(
            HttpRequest(),
            ctx,
            {"method": "POST", "output": "json"},
            {"url": artifacts.text(site.url + "/echo"), "body": artifacts.text("from input")},
        )
        assert produced.data is not None
        result = json.loads(produced.data)
        assert result["status"] == 200
        assert json.loads(result["body"])["body"] == "from input"

    async def test_redirect_within_allowlist_is_followed(
        self, tmp_path: Path, site: FakeServer
    ) -> None:
        ctx = _ctx(tmp_path, http_allowlist=["127.0.0.1"])
        produced = await run_node(HttpRequest(), ctx, {"url": f"{site.url}/redirect?to=/hello"})
        assert produced.data is not None and produced.data.decode().startswith("héllo")

    async def test_too_many_redirects(self, tmp_path: Path, site: FakeServer) -> None:
        ctx = _ctx(tmp_path, http_allowlist=["127.0.0.1"])
        with pytest.raises(NodeFailure, match="more than 5 redirects"):
            await run_node(HttpRequest(), ctx, {"url": site.url + "/loop"})
        assert len(site.requests) == 6

    async def test_response_size_limit(self, tmp_path: Path, site: FakeServer) -> None:
        ctx = _ctx(tmp_path, http_allowlist=["127.0.0.1"], http_max_response_bytes=1_000_000)
        with pytest.raises(NodeFailure, match=r"over the 1,000,000 limit|exceeds the limit"):
            await run_node(HttpRequest(), ctx, {"url": site.url + "/big"})

    async def test_http_error_fails_the_node(self, tmp_path: Path, site: FakeServer) -> None:
        ctx = _ctx(tmp_path, http_allowlist=["127.0.0.1"])
        with pytest.raises(NodeFailure, match="HTTP 404"):
            await run_node(HttpRequest(), ctx, {"url": site.url + "/missing"})
        produced = await run_node(
            HttpRequest(), ctx, {"url": site.url + "/missing", "fail_on_error": False}
        )
        assert produced.data == b"not found"

    async def test_time_limit(self, tmp_path: Path) -> None:
        """A server that accepts but never answers is cut off at http_timeout_seconds."""
        import socket

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        try:
            settings = make_settings(
                tmp_path / "t", http_allowlist=["127.0.0.1"], http_timeout_seconds=0.5
            )
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
            with pytest.raises(NodeFailure, match=r"longer than 0\.5 s") as info:
                await fetch(settings, "GET", url)
            assert info.value.code == "timeout"
        finally:
            listener.close()


def test_https_request_pins_the_address_and_keeps_the_name() -> None:
    """For https the URL carries the checked IP while SNI, certificate check and Host keep
    the real name (httpcore's ``sni_hostname`` extension)."""
    import httpx

    from nodeloom.nodes.http import _pinned_request

    client = httpx.AsyncClient()
    url = httpx.URL("https://example.com:8443/path?q=1")
    request = _pinned_request(client, "GET", url, ipaddress.ip_address("93.184.216.34"), {}, None)
    assert request.url.host == "93.184.216.34"
    assert request.url.port == 8443 and request.url.raw_path == b"/path?q=1"
    assert request.headers["Host"] == "example.com:8443"
    assert request.extensions["sni_hostname"] == "example.com"
    v6 = _pinned_request(
        client,
        "GET",
        httpx.URL("http://example.com/"),
        ipaddress.ip_address("2606:4700::1"),
        {},
        None,
    )
    assert v6.url.host == "2606:4700::1" and v6.headers["Host"] == "example.com"
