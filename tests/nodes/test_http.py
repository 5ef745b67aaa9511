"""HttpRequest and its SSRF guard, against real servers on 127.0.0.1."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import av
import pytest
from PIL import Image

from nodeloom.nodes import media
from nodeloom.nodes.http import Allowlist, BlockedAddress, HttpRequest, fetch, is_public
from nodeloom.sdk._node import Kind, NodeFailure
from tests.fakes import serve
from tests.media_files import SVG, audio_file, image_bytes, jpeg_with_gps, video_file
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


class _Media(BaseHTTPRequestHandler):
    """Files by path, each with a Content-Type that lies (the content decides)."""

    files: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def media_site(tmp_path: Path) -> Iterator[FakeServer]:
    made = tmp_path / "made"
    made.mkdir()
    _Media.files = {
        "/cmyk.jpg": image_bytes("JPEG", (40, 30), mode="CMYK"),
        "/gps.jpg": jpeg_with_gps(64, 48),
        "/tone.flac": audio_file(made / "tone.flac", "flac", "flac", seconds=1.0),
        "/clip.webm": video_file(made / "clip.webm", "webm", "libvpx", seconds=1.0),
        "/page.html": b"<html><body>not a picture</body></html>",
        "/svg": SVG,
        "/truncated.png": image_bytes("PNG", (300, 300))[:200],
        "/huge.png": image_bytes("PNG", (3000, 3000), mode="L"),
    }
    server = serve(_Media)
    try:
        yield server
    finally:
        server.stop()


def _media_ctx(tmp_path: Path, **overrides: object) -> media.LocalContext:
    return _ctx(tmp_path, http_allowlist=["127.0.0.1"], **overrides)


def _bound(output: str) -> HttpRequest:
    node = HttpRequest().bound(HttpRequest.spec.params.model_validate({"output": output}))
    assert isinstance(node, HttpRequest)
    return node


class TestMediaOutput:
    async def test_an_image_answer_becomes_a_png_without_exif(
        self, tmp_path: Path, media_site: FakeServer
    ) -> None:
        for path in ("/cmyk.jpg", "/gps.jpg"):
            produced = await run_node(
                HttpRequest(),
                _media_ctx(tmp_path),
                {"url": media_site.url + path, "output": "image"},
            )
            assert produced.path is not None
            with Image.open(produced.path) as image:
                assert image.format == "PNG"
                assert image.mode in ("RGB", "RGBA")
                assert not image.getexif()
                assert (image.width, image.height) == (produced.width, produced.height)
            assert b"SecretCam" not in produced.path.read_bytes()

    async def test_audio_and_video_are_converted(
        self, tmp_path: Path, media_site: FakeServer
    ) -> None:
        ctx = _media_ctx(tmp_path)
        audio = await run_node(
            HttpRequest(), ctx, {"url": media_site.url + "/tone.flac", "output": "audio"}
        )
        assert audio.path is not None and audio.duration_ms is not None
        assert 900 <= audio.duration_ms <= 1200
        with av.open(str(audio.path)) as container:
            assert container.streams.audio[0].codec_context.name.startswith("mp3")
        video = await run_node(
            HttpRequest(), ctx, {"url": media_site.url + "/clip.webm", "output": "video"}
        )
        assert video.path is not None and (video.width, video.height) == (64, 48)
        with av.open(str(video.path)) as container:
            assert container.streams.video[0].codec_context.name == "h264"

    @pytest.mark.parametrize(
        ("path", "output", "code", "says"),
        [
            ("/page.html", "image", "kind_mismatch", "not an image"),
            ("/svg", "image", "kind_mismatch", "markup"),
            ("/tone.flac", "image", "kind_mismatch", "set output to audio"),
            ("/gps.jpg", "video", "kind_mismatch", "set output to image"),
            ("/truncated.png", "image", "media_unreadable", "damaged|not a readable"),
            ("/huge.png", "image", "media_limit_exceeded", "exceeds the limit"),
        ],
    )
    async def test_refused_answers(
        self, tmp_path: Path, media_site: FakeServer, path: str, output: str, code: str, says: str
    ) -> None:
        ctx = _media_ctx(tmp_path, max_image_pixels=1_000_000)
        with pytest.raises(NodeFailure, match=says) as failed:
            await run_node(HttpRequest(), ctx, {"url": media_site.url + path, "output": output})
        assert failed.value.code == code

    async def test_the_size_limit_holds_for_files(
        self, tmp_path: Path, media_site: FakeServer
    ) -> None:
        ctx = _media_ctx(tmp_path, http_max_response_bytes=100)
        with pytest.raises(NodeFailure, match="over the 100 limit"):
            await run_node(
                HttpRequest(), ctx, {"url": media_site.url + "/gps.jpg", "output": "image"}
            )

    async def test_the_guard_holds_for_files(self, tmp_path: Path, media_site: FakeServer) -> None:
        with pytest.raises(BlockedAddress):
            await run_node(
                HttpRequest(),
                _ctx(tmp_path),
                {"url": media_site.url + "/gps.jpg", "output": "image"},
            )

    async def test_a_media_answer_to_a_text_output_says_which_output_to_set(
        self, tmp_path: Path, media_site: FakeServer
    ) -> None:
        with pytest.raises(NodeFailure, match="set output to image") as failed:
            await run_node(
                HttpRequest(), _media_ctx(tmp_path), {"url": media_site.url + "/gps.jpg"}
            )
        assert failed.value.code == "kind_mismatch"

    def test_the_output_param_sets_the_kind_and_the_budget(self) -> None:
        assert HttpRequest.spec.output.kind == Kind.TEXT
        for output in ("image", "audio", "video"):
            spec = _bound(output).spec
            assert spec.output.kind == Kind(output)
            assert spec.category == output
        assert _bound("json").spec is HttpRequest.spec
