"""HttpRequest: fetch a URL, with protection against server-side request forgery (SSRF).

A workflow author controls the URL, and the request leaves from inside our network, so:

1. We resolve the host ourselves and refuse it if *any* address is private, loopback,
   link-local, multicast, reserved, unspecified or otherwise not global, IPv4 and IPv6 alike,
   looking through IPv4-mapped, NAT64 and 6to4 IPv6 forms to the IPv4 address inside;
   unless ``settings.http_allowlist`` names the host, or a CIDR containing the address.
2. We connect to the address we checked: the URL's host is replaced by that IP, with the
   ``Host`` header and (for https) the TLS SNI name and certificate check set to the real
   host name. There is no second DNS lookup, so DNS rebinding cannot swap in another address.
3. Redirects are followed by hand (at most 5), and every hop is checked again.
4. The response is streamed and cut off at ``http_max_response_bytes`` (after decompression,
   so a gzip bomb is stopped too); the whole exchange is bounded by ``http_timeout_seconds``.

With ``output`` set to ``image``, ``audio`` or ``video`` the node's output is of that kind
(``bound``, so the graph is checked as for any typed node) and the response is streamed to
the node's scratch space, its kind read from its first bytes (nodes/sniff.py, never the
``Content-Type``), then decoded and converted exactly as an upload is (nodes/ingest.py), in
the node's sandbox process under the budget of that media category. An answer of another
kind fails the node with ``kind_mismatch`` (docs/adr/0037-http-media-and-webhook-media.md).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, BinaryIO, Literal, TypeVar

import httpx
from pydantic import Field

from nodeloom.nodes.sniff import HEAD_BYTES, Refused, sniff
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

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MEDIA_OUTPUTS = ("image", "audio", "video")
_WRITE_CHUNK = 1024 * 1024  # a file answer is written in pieces of this size, off the loop
KIND_MISMATCH = "kind_mismatch"
_A = {"image": "an image", "audio": "audio", "video": "a video"}
_T = TypeVar("_T")
MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Headers we set ourselves: a user-supplied Host could not reach another address (we connect
# to the checked IP), but it would make logs and virtual hosting lie.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})


class BlockedAddress(NodeFailure):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="address_refused")


def _embedded_ipv4(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4), else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def is_public(ip: IPAddress) -> bool:
    """Only globally routable unicast addresses are reachable without the allow-list."""
    ip = _embedded_ipv4(ip)
    return ip.is_global and not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


@dataclass(frozen=True)
class Allowlist:
    hosts: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> Allowlist:
        # Parsed once per allowlist: every provider node run checks its addresses against
        # it (issue #36). Frozen, so shared.
        return _parsed(tuple(settings.http_allowlist))

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> Allowlist:
        hosts: set[str] = set()
        networks = []
        for entry in entries:
            entry = entry.strip().lower()
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(entry.rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def names(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def contains(self, ip: IPAddress) -> bool:
        candidates = {ip, _embedded_ipv4(ip)}
        return any(
            c in net for c in candidates for net in self.networks if c.version == net.version
        )


@functools.lru_cache(maxsize=16)
def _parsed(entries: tuple[str, ...]) -> Allowlist:
    return Allowlist.from_entries(entries)


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal resolves to itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise NodeFailure(f"cannot resolve host {host!r}: {exc}") from exc
    addresses: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])  # drop an IPv6 zone id
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise NodeFailure(f"host {host!r} has no address")
    return addresses


async def checked_addresses(url: httpx.URL, allow: Allowlist) -> list[IPAddress]:
    """The addresses ``url`` may be fetched from (all of them checked), or ``BlockedAddress``."""
    if url.scheme not in ("http", "https"):
        raise NodeFailure(f"only http and https URLs are allowed, not {url.scheme or 'none'!r}")
    host = url.host
    if not host:
        raise NodeFailure("the URL has no host")
    addresses = await resolve(host, url.port or (443 if url.scheme == "https" else 80))
    if allow.names(host):
        return addresses
    for ip in addresses:
        if not is_public(ip) and not allow.contains(ip):
            # Said so that an operator with a ComfyUI on this machine or the office network
            # knows the one setting to change, without reading the docs first.
            raise BlockedAddress(
                f"refusing to connect to {host} ({ip}): private, loopback, link-local or "
                "otherwise non-public addresses are blocked unless NODELOOM_HTTP_ALLOWLIST "
                f"names them (the server's administrator can start it with "
                f"NODELOOM_HTTP_ALLOWLIST='[\"{host}\"]')"
            )
    return addresses


@dataclass
class Fetched:
    status: int
    headers: dict[str, str]
    body: str
    url: str
    # Set when the body is not UTF-8 text and its first bytes are those of an image, audio
    # or video: the kind a media ``output`` would have taken.
    media: str | None = None


async def fetch(
    settings: Settings,
    method: str,
    url: str,
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
) -> Fetched:
    """An SSRF-safe request (see the module docstring), bounded in time and size."""
    try:
        async with asyncio.timeout(settings.http_timeout_seconds):
            return await _fetch(settings, method, url, dict(headers or {}), body)
    except TimeoutError as exc:
        raise NodeFailure(
            f"the request took longer than {settings.http_timeout_seconds:g} s", code="timeout"
        ) from exc


async def _fetch(
    settings: Settings, method: str, url: str, headers: dict[str, str], body: str | None
) -> Fetched:
    async def read(response: httpx.Response, final: httpx.URL) -> Fetched:
        data = await _read_limited(response, settings.http_max_response_bytes)
        return Fetched(
            status=response.status_code,
            headers=dict(response.headers),
            body=data.decode(response.encoding or "utf-8", errors="replace"),
            url=str(final),
            media=_media_kind(data),
        )

    return await exchange(settings, method, url, headers, body, read)


@dataclass
class FetchedFile:
    status: int
    content_type: str
    path: Path
    head: bytes
    url: str


async def fetch_file(
    settings: Settings,
    method: str,
    url: str,
    headers: Mapping[str, str] | None,
    body: str | None,
    directory: Path,
) -> FetchedFile:
    """As ``fetch``, but the body is streamed to a new file in ``directory`` (never held
    whole in memory), cut off at ``http_max_response_bytes``."""
    limit = settings.http_max_response_bytes
    path = directory / f"http-{uuid.uuid4().hex}"

    async def read(response: httpx.Response, final: httpx.URL) -> FetchedFile:
        _check_declared(response, limit)
        size = buffered = 0
        pending: list[bytes] = []
        out = await asyncio.to_thread(_new_file, path)
        try:
            async for chunk in response.aiter_bytes():
                size = _within(size + len(chunk), limit)
                pending.append(chunk)
                buffered += len(chunk)
                if buffered >= _WRITE_CHUNK:
                    await asyncio.to_thread(out.write, b"".join(pending))
                    pending, buffered = [], 0
            await asyncio.to_thread(out.write, b"".join(pending))
        finally:
            await asyncio.to_thread(out.close)
        head = await asyncio.to_thread(_head, path)
        return FetchedFile(
            response.status_code, response.headers.get("content-type", ""), path, head, str(final)
        )

    try:
        async with asyncio.timeout(settings.http_timeout_seconds):
            return await exchange(settings, method, url, dict(headers or {}), body, read)
    except TimeoutError as exc:
        raise NodeFailure(
            f"the request took longer than {settings.http_timeout_seconds:g} s", code="timeout"
        ) from exc


async def exchange(
    settings: Settings,
    method: str,
    url: str,
    headers: dict[str, str],
    body: str | None,
    read: Callable[[httpx.Response, httpx.URL], Awaitable[_T]],
) -> _T:
    """The SSRF-safe exchange: every hop's addresses checked, redirects followed by hand,
    and the final response (streamed, not yet read) handed to ``read`` with its URL. The
    caller bounds the time."""
    allow = Allowlist.from_settings(settings)
    try:
        current = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise NodeFailure(f"invalid URL: {exc}") from exc
    user_headers = {k: v for k, v in headers.items() if k.lower() not in _RESERVED_HEADERS}
    timeout = httpx.Timeout(settings.http_timeout_seconds)
    # trust_env=False: an HTTP(S)_PROXY variable would otherwise send the request through a
    # proxy that does its own DNS lookup, bypassing the address check.
    # No keep-alive: a pooled connection is keyed by IP, and reusing one opened (and its
    # certificate checked) for another host name would blur which name was verified.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(
        timeout=timeout, trust_env=False, follow_redirects=False, limits=limits
    ) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            response = await _send_pinned(
                client, method, current, await checked_addresses(current, allow), user_headers, body
            )
            try:
                location = response.headers.get("location")
                if response.status_code in REDIRECTS and location:
                    target = current.join(location)
                    if response.status_code == 303 or (
                        response.status_code in (301, 302) and method == "POST"
                    ):
                        method, body = ("HEAD" if method == "HEAD" else "GET"), None
                    if (target.scheme, target.host, target.port) != (
                        current.scheme,
                        current.host,
                        current.port,
                    ):  # never hand credentials to another origin
                        user_headers = {
                            k: v
                            for k, v in user_headers.items()
                            if k.lower() not in _CREDENTIAL_HEADERS
                        }
                    current = target
                    continue
                return await read(response, current)
            finally:
                await response.aclose()
    raise NodeFailure(f"more than {MAX_REDIRECTS} redirects")


async def _send_pinned(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL,
    addresses: list[IPAddress],
    headers: Mapping[str, str],
    body: str | None,
) -> httpx.Response:
    """Send to the first checked address that accepts a connection (a name such as
    ``localhost`` may list ::1 first while the server listens on 127.0.0.1 only)."""
    for index, ip in enumerate(addresses):
        request = _pinned_request(client, method, url, ip, headers, body)
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as exc:
            if index == len(addresses) - 1:
                raise NodeFailure(f"cannot connect to {url.host}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise NodeFailure(f"request to {url.host} failed: {exc}") from exc
    raise NodeFailure(f"host {url.host!r} has no address")


def _pinned_request(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL,
    ip: IPAddress,
    headers: Mapping[str, str],
    body: str | bytes | None,
) -> httpx.Request:
    """A request to ``url`` that connects to ``ip``: the host in the URL becomes the IP; the
    Host header, the TLS SNI name and the certificate check keep the real name."""
    host = url.host
    default_port = 443 if url.scheme == "https" else 80
    host_header = host if url.port in (None, default_port) else f"{host}:{url.port}"
    if ":" in host and not host.startswith("["):
        host_header = f"[{host}]" if url.port in (None, default_port) else f"[{host}]:{url.port}"
    extensions: dict[str, str] = {}
    is_literal = True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        is_literal = False
    if url.scheme == "https" and not is_literal:
        extensions["sni_hostname"] = host
    return client.build_request(
        method,
        url.copy_with(host=str(ip)),
        headers={**headers, "Host": host_header},
        content=body.encode("utf-8") if isinstance(body, str) else body,
        extensions=extensions,
    )


def _new_file(path: Path) -> BinaryIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("xb")


def _head(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(HEAD_BYTES)


def _media_kind(data: bytes) -> str | None:
    """The kind of media ``data`` holds, when it is not UTF-8 text and starts as one does
    (a text may well start with ``ID3`` or have ``free`` at its fifth byte)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            return sniff(data[:HEAD_BYTES]).kind
        except Refused:
            return None
    return None


def _check_declared(response: httpx.Response, limit: int) -> None:
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise NodeFailure(f"the response is {int(declared):,} bytes, over the {limit:,} limit")


def _within(size: int, limit: int) -> int:
    """``size``, the bytes read so far, unless it is past ``limit``."""
    if size > limit:
        raise NodeFailure(f"the response exceeds the limit of {limit:,} bytes", "limit_exceeded")
    return size


async def _read_limited(response: httpx.Response, limit: int) -> bytes:
    _check_declared(response, limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size = _within(size + len(chunk), limit)
        chunks.append(chunk)
    return b"".join(chunks)


class HttpRequestParams(Params):
    url: str = Field(default="", max_length=8000, description="http(s) URL (or the url input).")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = Field(
        default="GET", description="HTTP method."
    )
    headers: dict[str, Annotated[str, Field(max_length=8000)]] = Field(
        default_factory=dict, max_length=50, description="Request headers."
    )
    body: str | None = Field(default=None, max_length=1_000_000, description="Request body.")
    output: Literal["body", "json", "image", "audio", "video"] = Field(
        default="body",
        description="body: the response text; json: {status, headers, body}; image, audio "
        "or video: the response as that kind of media (PNG, MP3, MP4), read from its content "
        "and converted as an upload is; another kind of answer fails the node.",
    )
    fail_on_error: bool = Field(default=True, description="Fail the node on HTTP 4xx/5xx.")


class HttpRequest(NodeType):
    spec = NodeSpec(
        type="HttpRequest",
        version=1,
        category="utility",
        title="HTTP request",
        description="Call a public URL and output the response text, or the image, audio or "
        "video it answers (the output param sets the kind). Private and local addresses are "
        "refused unless the server's allow-list names them.",
        inputs=(
            Input("url", Kind.TEXT, required=False),
            Input("body", Kind.TEXT, required=False),
        ),
        output=Output(Kind.TEXT),
        params=HttpRequestParams,
        cost=Cost(credits=1),
        cacheable=False,  # a URL's answer changes over time; never reuse an old response
    )

    def bound(self, params: HttpRequestParams) -> NodeType:
        """With a media ``output``, a node of that output kind, budgeted as that category
        of media (its decoding and conversion run under it)."""
        if params.output not in MEDIA_OUTPUTS:
            return self
        kind = Kind(params.output)
        spec = replace(self.spec, output=Output(kind), category=params.output)
        node: NodeType = type("HttpRequest", (HttpRequest,), {"spec": spec})()
        return node

    def param_problems(self, params: HttpRequestParams) -> list[str]:
        if params.url and not params.url.lower().startswith(("http://", "https://")):
            return ["url must start with http:// or https://"]
        return []

    async def run(
        self, ctx: NodeContext, params: HttpRequestParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        url = (input_text(inputs, "url") or params.url).strip()
        if not url:
            raise NodeFailure("set the url param or connect a url input")
        body = input_text(inputs, "body") or params.body
        if params.output in MEDIA_OUTPUTS:
            return await _media(ctx, params, url, body)
        result = await fetch(ctx.settings, params.method, url, params.headers, body)
        if params.fail_on_error and result.status >= 400:
            raise NodeFailure(f"{result.url} answered HTTP {result.status}: {result.body[:200]}")
        if result.media is not None:
            raise NodeFailure(
                f"{result.url} answered {_A[result.media]}, not text: set output to "
                f"{result.media} to take it as a file",
                KIND_MISMATCH,
            )
        if params.output == "json":
            payload = {"status": result.status, "headers": result.headers, "body": result.body}
            return Produced.text(json.dumps(payload, ensure_ascii=False))
        return Produced.text(result.body)


async def _media(
    ctx: NodeContext, params: HttpRequestParams, url: str, body: str | None
) -> Produced:
    """The response as an artifact of the kind ``params.output`` names: its kind read from
    its first bytes, then decoded and converted as an upload is, here in the node's sandbox
    process (a worker thread, under the process's memory and CPU limits)."""
    wanted = params.output
    fetched = await fetch_file(
        ctx.settings, params.method, url, params.headers, body, ctx.scratch_dir
    )
    if params.fail_on_error and fetched.status >= 400:
        raise NodeFailure(f"{fetched.url} answered HTTP {fetched.status}")
    declared = fetched.content_type.split(";")[0].strip() or "no content type"
    try:
        found = sniff(fetched.head)
    except Refused as exc:
        raise NodeFailure(
            f"{fetched.url} answered HTTP {fetched.status} ({declared}), not {_A[wanted]}: {exc}",
            KIND_MISMATCH,
        ) from exc
    if found.kind != wanted:
        raise NodeFailure(
            f"{fetched.url} answered {_A[found.kind]} ({found.format}), not {_A[wanted]}: "
            f"set output to {found.kind}",
            KIND_MISMATCH,
        )
    # Imported here: the provider adapters import this module for its address checks, and
    # the CLI reaches them through the credential kinds; it need not load Pillow and PyAV.
    from nodeloom.nodes import ingest

    made = await ctx.to_thread(
        ingest.ingest, found.kind, found.format, fetched.path, ctx.scratch_dir, ctx.settings
    )
    return Produced(
        path=Path(made.path), width=made.width, height=made.height, duration_ms=made.duration_ms
    )


NODES: list[NodeType] = [HttpRequest()]
