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
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

import httpx
from pydantic import Field

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
        hosts: set[str] = set()
        networks = []
        for entry in settings.http_allowlist:
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
                data = await _read_limited(response, settings.http_max_response_bytes)
            finally:
                await response.aclose()
            return Fetched(
                status=response.status_code,
                headers=dict(response.headers),
                body=data.decode(response.encoding or "utf-8", errors="replace"),
                url=str(current),
            )
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


async def _read_limited(response: httpx.Response, limit: int) -> bytes:
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise NodeFailure(f"the response is {int(declared):,} bytes, over the {limit:,} limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise NodeFailure(
                f"the response exceeds the limit of {limit:,} bytes", "limit_exceeded"
            )
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
    output: Literal["body", "json"] = Field(
        default="body", description="body: the response text; json: {status, headers, body}."
    )
    fail_on_error: bool = Field(default=True, description="Fail the node on HTTP 4xx/5xx.")


class HttpRequest(NodeType):
    spec = NodeSpec(
        type="HttpRequest",
        version=1,
        category="utility",
        title="HTTP request",
        description="Call a public URL and output the response text. Private and local "
        "addresses are refused unless the server's allow-list names them.",
        inputs=(
            Input("url", Kind.TEXT, required=False),
            Input("body", Kind.TEXT, required=False),
        ),
        output=Output(Kind.TEXT),
        params=HttpRequestParams,
        cost=Cost(credits=1),
        cacheable=False,  # a URL's answer changes over time; never reuse an old response
    )

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
        body = input_text(inputs, "body")
        result = await fetch(ctx.settings, params.method, url, params.headers, body or params.body)
        if params.fail_on_error and result.status >= 400:
            raise NodeFailure(f"{result.url} answered HTTP {result.status}: {result.body[:200]}")
        if params.output == "json":
            payload = {"status": result.status, "headers": result.headers, "body": result.body}
            return Produced.text(json.dumps(payload, ensure_ascii=False))
        return Produced.text(result.body)


NODES: list[NodeType] = [HttpRequest()]
