"""The policy every provider adapter follows, in one place.

A provider node declares ``NodeSpec(adapter=True, sandboxed=False, credential_kinds=...)``
(``adapter_spec``).
The executor then runs it on the event loop with a ``ProviderContext`` and holds no
execution slot for it: a 90-second generation is a coroutine waiting on a socket, not a
sandbox process. What the node does with CPU (decoding a downloaded WebP, re-encoding a WAV)
goes to a sandbox process through ``ctx.convert``, which ``Provider.download`` calls.

- **Time budget**: the node's budget (its category's wall time, ``NODELOOM_NODE_BUDGETS``
  per type, the plan's cap) is enforced by the executor around ``run``; ``time_left`` says
  what remains, for a provider's own wait parameter.
- **Retries**: ``Provider.request`` retries 408/429/5xx and dropped connections with
  exponential back-off, honouring ``Retry-After`` (capped); a submission (``idempotent``
  false: every paid call) is sent again only when the provider cannot have accepted it (429,
  or no connection made).
  Any other answer fails the node with the provider's own message quoted (secrets masked).
- **Idempotent resume**: ``submit_once`` stores the provider's job (prediction, prompt or
  request id) on the node run, committed, before the node waits on it; the same node run
  again after its process stopped finds it (``ctx.remembered_job``) and attaches to it, so a
  paid generation is never submitted twice for the same request.
- **Cancel**: ``cancelling`` asks the provider to stop the job when our run is cancelled (not
  when the server merely stops: the job is then resumed by the next process). The
  submission itself goes through ``submitted``: a stop arriving during the call waits for
  its answer (so the job it made is known and stored) before the job is cancelled, and the
  run's cancel flag is read once the id is committed, so a cancel landing between the
  provider's answer and the commit still stops the job.
- **Downloads**: ``Provider.download`` fetches every URL a provider hands back through the
  SSRF guard of HttpRequest (every address checked, the connection pinned to it, redirects
  checked again), streams it to the node's scratch directory within
  ``provider_download_max_bytes``, and has a sandbox process make one of our four artifact
  types of it (``adapters/media.py``). ``data:`` URIs are accepted too.
- **Price**: ``Cost(credits=...)`` per call, ``per_second`` per second of output, or
  ``pass_through`` of the provider's reported cost (``Produced.provider_cost_usd``) at
  ``provider_credits_per_usd`` with ``provider_cost_markup``. A failed node charges nothing.
- **Progress**: ``ctx.progress(fraction)`` becomes a ``node.progress`` event for WebSocket
  subscribers (rate-limited by the engine).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import email.utils
import functools
import hashlib
import http.cookiejar
import json
import random
import ssl
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeGuard, TypeVar, cast

import certifi
import httpx
from pydantic import Field

from nodeloom import masking
from nodeloom.nodes.http import Allowlist, _pinned_request, checked_addresses
from nodeloom.sdk._node import (
    Cost,
    Input,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    Params,
    Produced,
    spec_family,
)
from nodeloom.settings import Settings

BACKOFF_BASE = 0.5  # seconds; doubled per attempt, with jitter
BACKOFF_MAX = 30.0
RETRY_AFTER_MAX = 60.0  # never sleep longer than this on a provider's say-so
POLL_FIRST = 0.5  # seconds between status polls: from this, growing to POLL_MAX
POLL_MAX = 5.0
CANCEL_TIMEOUT = 10.0  # seconds given to a provider's cancel call (and to a submission
# that was under way when the node was stopped, to learn the id of the job it made)
CANCEL_GRACE = 30.0  # seconds a node that found its run cancelled waits for the engine's stop
MAX_REDIRECTS = 5
MESSAGE_MAX = 500  # characters of a provider's error quoted in the node's failure
DOWNLOAD_CHUNK = 256 * 1024
KEEP_ALIVE = 30.0  # seconds an idle connection of one node run's own client is kept
# Seconds an idle shared connection (ProviderConnections) is kept: below the 5 s of
# uvicorn's and many servers' keep-alive, so a submission (never resent), which may reuse
# one, rarely meets a connection the provider is closing at that moment.
SHARED_KEEP_ALIVE = 4.0
KEEP_PER_ORIGIN = 100  # idle connections kept per provider API origin, per process

T = TypeVar("T")


@dataclass(frozen=True)
class Credential:
    """An account credential a node names, decrypted (only on the server): its kind, its
    public fields (``base_url``...) and its secret ones (never in a repr, a log or an
    error)."""

    id: str
    kind: str
    fields: Mapping[str, Any]
    secret: Mapping[str, str] = field(repr=False)

    def value(self, name: str) -> str | None:
        """A field, secret or not."""
        found = self.secret.get(name, self.fields.get(name))
        return None if found is None else str(found)


class ProviderContext(NodeContext, Protocol):
    """What the executor gives a provider node (``NodeSpec.adapter``): see
    engine/context.py ``ProviderNodeContext``."""

    credential: Credential | None
    remembered_job: dict[str, Any] | None
    deadline: float
    # The process's kept-alive provider connections (None: each Provider opens its own).
    connections: ProviderConnections | None

    async def remember_job(self, job: dict[str, Any] | None) -> None:
        """Store (None: clear) the provider job on the node run; committed on return."""

    async def run_cancelled(self) -> bool:
        """Whether the node's run was cancelled (as opposed to the server stopping)."""

    async def convert(self, path: Path, kind: str) -> Produced:
        """``path`` (a file of the node's scratch directory) made into an artifact of
        ``kind``, in a sandbox process (adapters/media.py)."""

    def hook_url(self, provider: str) -> str | None:
        """The URL ``provider`` may call about this node run's job (adapters/hooks.py), or
        None when the server has no public base URL: then the node polls."""

    async def stored_job(self) -> dict[str, Any] | None:
        """The provider job as stored on the node run now, with what a webhook delivered."""

    def signals(self) -> contextlib.AbstractAsyncContextManager[Signals]:
        """Around a wait: ``wait(most)`` returns once a webhook may have been kept for this
        node run (True), or after ``most`` seconds (False)."""


class Signals(Protocol):
    async def wait(self, most: float) -> bool:
        """Until the node run may have changed (True) or ``most`` seconds pass (False)."""
        ...


def adapter_spec(
    type_: str,
    title: str,
    description: str,
    params: type[Params],
    *inputs: Input,
    output: Kind,
    cost: Cost,
    credential_kinds: tuple[str, ...],
    **flags: Any,
) -> NodeSpec:
    """The spec of a provider node, in the ``ai`` category: an adapter, not sandboxed (it
    waits on the event loop), taking a credential of ``credential_kinds``; ``flags`` set
    the spec's other flags (``cacheable``...)."""
    plain = spec_family("ai", output, cost)(type_, title, description, params, *inputs)
    return replace(plain, sandboxed=False, adapter=True, credential_kinds=credential_kinds, **flags)


def credential_field(*kinds: str) -> Any:
    """The ``credential`` param of a provider node taking a credential of ``kinds`` (list
    them in ``NodeSpec.credential_kinds`` too): required, an id of the account's
    credentials; ``x-credential-kinds`` in its JSON schema tells the editor which to offer."""
    return Field(
        min_length=1,
        max_length=64,
        description=f"A {' or '.join(kinds)} credential of this account (its id).",
        json_schema_extra={"x-credential-kinds": list(kinds)},
    )


def max_seconds_field() -> Any:
    """The ``max_seconds`` param of a provider node answering audio or video: the length
    the estimate holds (a per-second price); the charge counts the real length."""
    return Field(
        default=30,
        ge=1,
        le=600,
        description="Longest output expected, in seconds: the estimate holds it; the charge "
        "counts the real length, never more.",
    )


def is_provider_context(ctx: NodeContext) -> TypeGuard[ProviderContext]:
    """Whether ``ctx`` is a provider node's context. Not ``isinstance`` on the protocol: that
    reads every member, ``scratch_dir`` too, whose first read creates the directory (a
    mkdir and an rmtree per provider node run)."""
    return callable(getattr(type(ctx), "remember_job", None)) and hasattr(ctx, "deadline")


def provider_context(ctx: NodeContext) -> ProviderContext:
    """``ctx`` as a provider node's context; a node run elsewhere (in a sandbox) is a bug."""
    if not is_provider_context(ctx):
        raise NodeFailure("a provider node must run on the server", "internal_error")
    return ctx


def connections_of(ctx: NodeContext) -> ProviderConnections | None:
    """The kept-alive connections a node run's Provider should use, if the process has any."""
    return ctx.connections if is_provider_context(ctx) else None


def time_left(ctx: ProviderContext) -> float:
    """Seconds left of the node's time budget."""
    return max(0.0, ctx.deadline - asyncio.get_running_loop().time())


def require_credential(ctx: ProviderContext, *kinds: str) -> Credential:
    credential = ctx.credential
    if credential is None or (kinds and credential.kind not in kinds):
        wanted = " or ".join(kinds) or "a"
        raise NodeFailure(
            f"this node needs a {wanted} credential (param credential)", "invalid_credential"
        )
    return credential


# ----------------------------------------------------------------------------- errors


class ProviderError(NodeFailure):
    """The provider refused or failed: its own words, quoted (secrets masked)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message, "provider_error")
        self.status = status


def quoted(body: Any, fallback: str = "") -> str:
    """The provider's explanation in an error body, whatever its shape (OpenAI's
    ``{"error": {"message"}}``, Replicate's ``{"detail"}``, fal's ``{"detail": [...]}``)."""
    if isinstance(body, dict):
        for key in ("error", "detail", "message", "title"):
            value = body.get(key)
            if isinstance(value, dict):
                inner = value.get("message") or value.get("detail")
                if isinstance(inner, str) and inner:
                    return inner
            elif isinstance(value, str) and value:
                return value
            elif isinstance(value, list) and value:
                parts = [quoted(item, json.dumps(item)[:200]) for item in value[:3]]
                return "; ".join(parts)
        msg = body.get("msg")
        if isinstance(msg, str):
            return msg
    if isinstance(body, str):
        return body
    return fallback


def _response_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:MESSAGE_MAX]
    return quoted(body, response.text.strip())[:MESSAGE_MAX]


# ----------------------------------------------------------------------------- requests


def backoff(attempt: int) -> float:
    delay: float = min(BACKOFF_MAX, BACKOFF_BASE * 2**attempt)
    return delay * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not cryptography


def poll_delays(first: float = POLL_FIRST, most: float = POLL_MAX) -> Iterator[float]:
    """Seconds to wait between status polls: growing by half each time, up to ``most``."""
    delay = first
    while True:
        yield delay
        delay = min(most, delay * 1.5)


def retry_after(response: httpx.Response) -> float | None:
    """The seconds a provider's ``Retry-After`` asks for (a number or an HTTP date)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def transient(status: int) -> bool:
    return status in (408, 429) or status >= 500


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every provider client: building one (loading the CA bundle) costs
    tens of milliseconds of CPU, which a node per client would spend on the event loop."""
    return ssl.create_default_context(cafile=certifi.where())


def accepted(status: int) -> bool:
    """A connection test's success: a 2xx answer (a redirect, not followed, is none)."""
    return 200 <= status < 300


async def connection_test(
    api: Provider, path: str, within: float, accepted_by: Callable[[dict[str, Any]], str]
) -> tuple[bool, int | None, str]:
    """A credential's connection test: ``GET path`` with ``api`` within ``within`` seconds; (ok,
    HTTP status, message): ``accepted_by(answer)`` on a 2xx, else the provider's error quoted
    or why it was not reached, the secrets masked."""
    try:
        async with asyncio.timeout(within), api:
            body = await api.json("GET", path, ok=accepted)
    except ProviderError as exc:
        return False, exc.status, exc.message
    except NodeFailure as exc:
        return False, None, api.mask(exc.message)
    except TimeoutError:
        return False, None, f"{api.name} did not answer within {within:g} s"
    return True, 200, accepted_by(body)


async def read_json(api: Provider, path: str, within: float) -> dict[str, Any]:
    """``GET path`` with ``api`` for someone waiting on the answer (a model's schema for the
    editor), within ``within`` seconds: every failure is a ProviderError quoting the provider
    or saying why it was not reached (the address check), the secrets masked."""
    try:
        async with asyncio.timeout(within), api:
            return await api.json("GET", path)
    except TimeoutError as exc:
        raise ProviderError(f"{api.name} did not answer within {within:g} s") from exc
    except ProviderError:
        raise
    except NodeFailure as exc:  # the address check refused the API's address
        raise ProviderError(api.mask(exc.message)) from exc


def redirected(name: str, response: httpx.Response) -> str:
    """A redirect, which no provider call follows (the credential would go with it): where
    it led, so a wrong base URL or a login page in front of the API shows."""
    location = response.headers.get("location")
    to = f" to {location[:200]}" if location else ""
    return f"{name} answered with a redirect (HTTP {response.status_code}){to}, not followed"


def _not_accepted(status: int) -> bool:
    """Answers that say a submission was not taken (safe to send again): only a 429. A
    503 may come from a provider that took the job and then failed to answer (a paid job
    made twice), so a submission is not sent again after it."""
    return status == 429


def new_client(
    timeout: httpx.Timeout | None, keep: int, expiry: float = KEEP_ALIVE
) -> httpx.AsyncClient:
    """A client for provider calls that keeps up to ``keep`` idle connections.

    trust_env=False: a proxy would resolve names itself, past the address check. A pooled
    connection is keyed by address, not by the name that was checked: a client that keeps
    connections must only ever be asked for one name (the provider API's own origin, so
    its polls skip a handshake each); URLs on other hosts (outputs) go through one that
    keeps none. No cookies: a provider's Set-Cookie is never sent back (a shared client
    would otherwise carry one account's cookie into another's calls)."""
    return httpx.AsyncClient(
        timeout=timeout,
        verify=_tls(),
        trust_env=False,
        follow_redirects=False,
        cookies=_no_cookies(),
        limits=httpx.Limits(
            max_connections=None, max_keepalive_connections=keep, keepalive_expiry=expiry
        ),
    )


def _no_cookies() -> http.cookiejar.CookieJar:
    # A jar (not an httpx.Cookies, which httpx copies into a plain jar) that takes nothing.
    return http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


class ProviderConnections:
    """Kept-alive connections to provider APIs, kept by one process between node runs.

    A node run borrows a client for its provider API's origin (``lend``) and gives it
    back when done (``give_back``): the next run's create call and polls reuse the
    connection an earlier run opened (no TCP and TLS handshake per generation). A client
    serves one node run at a time, each with a connection or two: one client shared by
    hundreds of runs at once spends its CPU scanning its own pool (measured: a run cost
    twice as much). Idle clients are kept per origin (the most recent first, at most
    ``keep``, none idle longer than ``SHARED_KEEP_ALIVE``). The executor owns one
    (``ExecutorEnv``) and closes it when the process stops; it belongs to that process's
    event loop.

    A client goes from one account's run to another's: only sockets are shared. Every
    request carries its own credential headers and goes through its caller's address
    check, pinned to the address checked; nothing a response sets (cookies) is kept."""

    def __init__(self, keep: int = KEEP_PER_ORIGIN) -> None:
        self._keep = keep
        self._idle: dict[Hashable, list[tuple[float, httpx.AsyncClient]]] = {}
        self._lent: dict[httpx.AsyncClient, Hashable] = {}

    def lend(
        self, origin: tuple[str, str, int | None], timeout: httpx.Timeout
    ) -> httpx.AsyncClient:
        """An idle client for ``origin`` with ``timeout``, or a new one."""
        key = (origin, tuple(sorted(timeout.as_dict().items())))
        idle = self._idle.get(key)
        client = None
        if idle:
            since, client = idle[-1]
            if time.monotonic() - since < SHARED_KEEP_ALIVE and not client.is_closed:
                idle.pop()
            else:
                client = None  # stale, as is every older one: closed on the next return
        if client is None:
            client = new_client(timeout, keep=2, expiry=SHARED_KEEP_ALIVE)
        self._lent[client] = key
        return client

    async def give_back(self, client: httpx.AsyncClient) -> None:
        """``client``, done with, kept for the next run; the stale and surplus closed."""
        key = self._lent.pop(client, None)
        if key is None:
            await client.aclose()
            return
        idle = self._idle.setdefault(key, [])
        now = time.monotonic()
        closing = [c for since, c in idle if now - since >= SHARED_KEEP_ALIVE]
        if closing:
            idle[:] = [(since, c) for since, c in idle if now - since < SHARED_KEEP_ALIVE]
        if not client.is_closed:
            if len(idle) < self._keep:
                idle.append((now, client))
            else:
                closing.append(client)
        for stale in closing:
            await stale.aclose()

    def __len__(self) -> int:
        """Idle clients kept, over every origin."""
        return sum(len(idle) for idle in self._idle.values())

    async def aclose(self) -> None:
        idle, self._idle, self._lent = self._idle, {}, {}
        for clients in idle.values():
            for _since, client in clients:
                await client.aclose()


class Provider:
    """One provider's HTTP API, as one node run uses it.

    ``base_url`` and every URL the provider hands back go through the SSRF guard: private,
    loopback and link-local addresses are refused unless ``NODELOOM_HTTP_ALLOWLIST`` names
    them. ``headers`` (the credential's) go only to ``base_url``'s origin; ``secrets`` are
    masked out of anything quoted. Use as ``async with Provider(...) as api:``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        name: str,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        secrets: tuple[str, ...] = (),
        connections: ProviderConnections | None = None,
    ) -> None:
        self.settings = settings
        self._connections = connections
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.secrets = tuple(s for s in secrets if s)
        self.guard = Allowlist.from_settings(settings)
        self._origin = _origin(httpx.URL(self.base_url))
        self._timeout: httpx.Timeout | None = None
        self._client: httpx.AsyncClient | None = None
        self._other: httpx.AsyncClient | None = None

    @classmethod
    def waited_on(
        cls,
        settings: Settings,
        *,
        name: str,
        base_url: str,
        headers: Mapping[str, str],
        secrets: tuple[str, ...],
    ) -> Provider:
        """The API for a call someone waits on (a credential's connection test, a model's
        schema for the editor): without retries, which would only make them wait longer."""
        unretried = settings.model_copy(update={"provider_max_retries": 0})
        return cls(unretried, name=name, base_url=base_url, headers=headers, secrets=secrets)

    async def __aenter__(self) -> Provider:
        self._timeout = httpx.Timeout(self.settings.provider_timeout_seconds, connect=10.0)
        if self._connections is not None:
            self._client = self._connections.lend(self._origin, self._timeout)
        else:
            self._client = new_client(self._timeout, keep=2)
        return self

    async def __aexit__(self, *exc: object) -> None:
        client, other, self._client, self._other = self._client, self._other, None, None
        if client is not None:
            if self._connections is not None:
                await self._connections.give_back(client)  # kept for the next node run
            else:
                await client.aclose()
        if other is not None:
            await other.aclose()

    def client_for(self, url: httpx.URL) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("use the provider as `async with`")
        if _origin(url) == self._origin:
            return self._client
        # Made on the first URL on another host (an output to download): a run whose
        # output comes in the answer (text) never builds it (issue #36).
        if self._other is None:
            self._other = new_client(self._timeout, keep=0)
        return self._other

    def url(self, path_or_url: str) -> str:
        if path_or_url.startswith(("http://", "https://")):
            return path_or_url
        return self.base_url + "/" + path_or_url.lstrip("/")

    def mask(self, text: str) -> str:
        """``text`` without this provider's secrets, in any form they are quoted in
        (``nodeloom.masking``)."""
        return masking.mask(text, self.secrets)

    def _headers_for(self, url: httpx.URL, extra: Mapping[str, str] | None) -> dict[str, str]:
        sent = dict(self.headers) if _origin(url) == self._origin else {}
        sent.update(extra or {})
        return sent

    async def _send(
        self,
        method: str,
        url: httpx.URL,
        headers: Mapping[str, str],
        content: bytes | None,
        *,
        stream: bool = False,
    ) -> httpx.Response:
        """One request through the SSRF guard, connected to a checked address."""
        addresses = await checked_addresses(url, self.guard)
        client = self.client_for(url)
        for index, ip in enumerate(addresses):
            request = _pinned_request(client, method, url, ip, headers, content)
            try:
                return await client.send(request, stream=stream)
            except httpx.ConnectError:
                if index == len(addresses) - 1:
                    raise
        raise NodeFailure(f"host {url.host!r} has no address", "provider_error")

    async def request(
        self,
        method: str,
        path_or_url: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
        ok: Callable[[int], bool] = lambda status: status < 400,
        retry: Callable[[int], bool] | None = None,
    ) -> httpx.Response:
        """The provider's answer (read in full) once ``ok`` accepts its status, after
        retries; ``ProviderError`` quoting the provider otherwise. The body is ``json_body``
        (sent as JSON) or ``content`` (with its Content-Type in ``headers``). ``retry``:
        which refused statuses are asked again (by default the transient ones, or for a
        request that is not ``idempotent`` those that say it was not taken)."""
        url = httpx.URL(self.url(path_or_url))
        sent = self._headers_for(url, headers)
        if json_body is not None:
            content = json.dumps(json_body).encode("utf-8")
            sent.setdefault("Content-Type", "application/json")
        sent.setdefault("Accept", "application/json")
        attempts = self.settings.provider_max_retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self._send(method, url, sent, content)
            except httpx.ConnectError as exc:
                if last:
                    raise self._unreachable(attempts, exc) from exc
                await asyncio.sleep(backoff(attempt))
                continue
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                # The request may have reached the provider: a submission is not resent. A
                # provider closing a kept-alive connection as a poll reuses it is the usual
                # RemoteProtocolError: a status read is simply asked again.
                if last or not idempotent:
                    raise self._unreachable(attempt + 1, exc) from exc
                await asyncio.sleep(backoff(attempt))
                continue
            if ok(response.status_code):
                return response
            again = retry or (transient if idempotent else _not_accepted)
            if again(response.status_code) and not last:
                wait = retry_after(response)
                await asyncio.sleep(
                    min(RETRY_AFTER_MAX, wait) if wait is not None else backoff(attempt)
                )
                continue
            raise self.refused(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def _unreachable(self, attempts: int, exc: Exception) -> ProviderError:
        return ProviderError(
            f"{self.name} did not answer after {attempts} attempt{'s' if attempts != 1 else ''} "
            f"({type(exc).__name__})"
        )

    def refused(self, response: httpx.Response) -> ProviderError:
        if response.is_redirect:
            return ProviderError(self.mask(redirected(self.name, response)), response.status_code)
        message = self.mask(_response_message(response))
        return ProviderError(
            f"{self.name} refused the request (HTTP {response.status_code}): {message}",
            response.status_code,
        )

    def failed(self, message: Any) -> ProviderError:
        """The provider ran the job and it failed: its reason quoted."""
        text = quoted(message, str(message) if message is not None else "")
        text = self.mask(text.strip())[:MESSAGE_MAX] or "no reason given"
        return ProviderError(f"{self.name} failed: {text}")

    async def json(self, method: str, path_or_url: str, **kwargs: Any) -> dict[str, Any]:
        response = await self.request(method, path_or_url, **kwargs)
        try:
            body = response.json()
        except ValueError as exc:
            raise ProviderError(f"{self.name} answered with invalid JSON") from exc
        if not isinstance(body, dict):
            raise ProviderError(f"{self.name} answered with unexpected JSON")
        return cast(dict[str, Any], body)

    # -- downloads -------------------------------------------------------------------------

    async def download(self, ctx: ProviderContext, url: str, kind: Kind) -> Produced:
        """The file at ``url`` (a URL the provider handed back, or a ``data:`` URI) as an
        artifact of ``kind``: fetched through the SSRF guard, streamed to the scratch
        directory within the size limit, converted in a sandbox process."""
        path = await self.fetch_file(ctx, url)
        return await ctx.convert(path, kind.value)

    async def fetch_file(self, ctx: ProviderContext, url: str) -> Path:
        limit = min(self.settings.provider_download_max_bytes, self.settings.max_artifact_bytes)
        path = ctx.scratch_dir / f"download-{uuid.uuid4().hex}"
        if url.startswith("data:"):
            await asyncio.to_thread(_write_data_uri, url, path, limit)
            return path
        current = _parse_url(url)
        for _hop in range(MAX_REDIRECTS + 1):
            headers = self._headers_for(current, {"Accept": "*/*"})
            try:
                response = await self._send("GET", current, headers, None, stream=True)
            except httpx.HTTPError as exc:
                raise ProviderError(
                    f"cannot download {self.name}'s output from {current.host} "
                    f"({type(exc).__name__})"
                ) from exc
            try:
                location = response.headers.get("location")
                if response.status_code in (301, 302, 303, 307, 308) and location:
                    current = current.join(location)
                    continue
                if response.status_code >= 400:
                    await response.aread()
                    raise ProviderError(
                        f"downloading {self.name}'s output failed (HTTP {response.status_code})",
                        response.status_code,
                    )
                await _stream_to(response, path, limit, self.name)
            finally:
                await response.aclose()
            return path
        raise ProviderError(f"{self.name}'s output URL redirects more than {MAX_REDIRECTS} times")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


def _parse_url(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ProviderError(f"the provider handed back an invalid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise ProviderError(f"the provider handed back a {parsed.scheme or 'schemeless'} URL")
    return parsed


def too_large(name: str, limit: int) -> NodeFailure:
    return NodeFailure(
        f"{name}'s output is larger than the download limit of {limit:,} bytes",
        "limit_exceeded",
    )


async def _stream_to(response: httpx.Response, path: Path, limit: int, name: str) -> None:
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_large(name, limit)
    size = 0
    with path.open("wb") as out:
        async for chunk in response.aiter_bytes(DOWNLOAD_CHUNK):
            size += len(chunk)
            if size > limit:
                raise too_large(name, limit)
            out.write(chunk)  # a local file: the page cache takes it at once


def _write_data_uri(uri: str, path: Path, limit: int) -> None:
    header, comma, payload = uri.partition(",")
    if not comma:
        raise ProviderError("the provider handed back a malformed data: URI")
    if len(payload) * 3 // 4 > limit:
        raise too_large("the provider", limit)
    try:
        if header.endswith(";base64"):
            data = base64.b64decode(payload, validate=True)
        else:
            data = urllib.parse.unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as exc:
        raise ProviderError("the provider handed back a malformed data: URI") from exc
    path.write_bytes(data)


# ----------------------------------------------------------------------------- jobs


def request_fingerprint(request: Any) -> str:
    """What identifies a submission: the same request after a crash attaches to its job."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Job:
    """A provider job the node waits on: ``data`` as stored on the node run (``id`` and
    whatever the adapter needs to follow it: status URL...), ``attached`` when it was
    submitted by an earlier attempt of this node run (after a crash)."""

    data: dict[str, Any]
    attached: bool

    @property
    def id(self) -> str:
        return str(self.data["id"])


async def submit_once(
    ctx: ProviderContext,
    provider: str,
    request: Any,
    submit: Callable[[], Awaitable[dict[str, Any]]],
    *,
    cancel: Callable[[Job], Awaitable[Any]],
) -> Job:
    """The job for ``request``: the one an earlier attempt of this node run submitted for
    the same provider and request, else a new one from ``submit`` (which returns at least
    ``{"id": ...}``), stored on the node run — committed — before this returns, so a crash
    from here on attaches to it instead of submitting again. The submission goes through
    ``submitted``: ``cancel`` stops the new job at the provider if the run is cancelled
    while it is made."""
    fingerprint = request_fingerprint(request)
    known = ctx.remembered_job
    if (
        isinstance(known, dict)
        and known.get("provider") == provider
        and known.get("request") == fingerprint
        and known.get("id")
    ):
        return Job(dict(known), attached=True)

    async def submission() -> Job:
        data = await submit()
        if "id" not in data:
            raise ProviderError(f"{provider} accepted the job but gave no id")
        stored = {**data, "provider": provider, "request": fingerprint}
        await ctx.remember_job(stored)
        return Job(stored, attached=False)

    return await submitted(ctx, submission, cancel)


async def submitted(
    ctx: ProviderContext,
    submission: Callable[[], Awaitable[T]],
    cancel: Callable[[T], Awaitable[Any]],
) -> T:
    """What ``submission`` returns — the call that makes a paid job at the provider, and
    the job's id stored on the node run — with our run's cancel honoured however it lands:

    - **during the call** (the node is stopped: the run was cancelled, or the server is
      stopping): the call is let finish, within CANCEL_TIMEOUT, so the job it made is known
      and stored rather than left running unknown; then, if the run was cancelled,
      ``cancel(result)`` asks the provider to stop it, and the node's stop goes on (a server
      that stops leaves the job: the next process attaches to it);
    - **once the id is committed**, the run's cancel flag is read: a cancel that came
      between the provider's answer and the commit, or whose stop did not reach the node,
      still cancels the job at the provider, and the node ends (``stop_cancelled``).

    A stop after this returns is the caller's to honour, with ``cancelling`` around its
    wait."""
    task = asyncio.ensure_future(submission())
    try:
        result = await asyncio.shield(task)
    except asyncio.CancelledError:
        await to_the_end(_settle(ctx, task, cancel))
        raise
    try:
        cancelled = await ctx.run_cancelled()
    except asyncio.CancelledError:
        await to_the_end(_cancel_if_run_cancelled(ctx, lambda: cancel(result)))
        raise
    if cancelled:
        await to_the_end(_cancel_job(ctx, lambda: cancel(result)))
        await stop_cancelled(ctx)
    return result


async def to_the_end(step: Awaitable[None]) -> None:
    """``step`` (a bounded clean-up: a provider's cancel call...) run to its end even when
    this task is stopped again meanwhile, the stop raised once it is done. A bare
    ``asyncio.shield`` would let the node end first: its run would be recorded cancelled
    while the provider has yet to hear of it, and the node's HTTP client, closed on the way
    out, would cut the call short."""
    task = asyncio.ensure_future(step)
    stopped = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            stopped = True
    task.result()
    if stopped:
        raise asyncio.CancelledError


async def _settle(
    ctx: ProviderContext, task: asyncio.Future[T], cancel: Callable[[T], Awaitable[Any]]
) -> None:
    """A submission under way when the node was stopped: its answer awaited (within
    CANCEL_TIMEOUT; past that it is abandoned), then its job cancelled if the run was."""
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT):
            result = await task
    except (Exception, asyncio.CancelledError):
        return  # refused, failed or unanswered: no job we know of
    await _cancel_if_run_cancelled(ctx, lambda: cancel(result))


async def stop_cancelled(ctx: ProviderContext) -> NoReturn:
    """The run was cancelled and the node's job stopped at the provider. The engine stops
    the node soon: the cancel flag is committed before the run's driver is told (or the
    queue job aborted). Wait for that stop, so the node is recorded ``cancelled`` like every
    node a cancel stops; should it not come within CANCEL_GRACE, end anyway."""
    await asyncio.sleep(min(CANCEL_GRACE, time_left(ctx)))
    raise NodeFailure("the run was cancelled", "cancelled")


async def forget_job(ctx: ProviderContext) -> None:
    """The job ended in a way that must not be attached to again (it failed or was
    cancelled): a later attempt submits afresh."""
    if ctx.remembered_job is not None:
        await ctx.remember_job(None)


@contextlib.asynccontextmanager
async def cancelling(
    ctx: ProviderContext, cancel: Callable[[], Awaitable[Any]]
) -> AsyncIterator[None]:
    """Around a wait: when the node is stopped because its run was cancelled, ask the
    provider to stop the job (``cancel``, within CANCEL_TIMEOUT, its failure ignored). A
    server that stops leaves the job running: the next process attaches to it."""
    try:
        yield
    except asyncio.CancelledError:
        await to_the_end(_cancel_if_run_cancelled(ctx, cancel))
        raise


async def _cancel_if_run_cancelled(
    ctx: ProviderContext, cancel: Callable[[], Awaitable[Any]]
) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CANCEL_TIMEOUT):
            cancelled = await ctx.run_cancelled()
        if cancelled:
            await _cancel_job(ctx, cancel)


async def _cancel_job(ctx: ProviderContext, cancel: Callable[[], Awaitable[Any]]) -> None:
    """Ask the provider to stop the job (within CANCEL_TIMEOUT, its failure ignored: the run
    is cancelled whatever the provider says) and forget it (a retry submits afresh)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CANCEL_TIMEOUT):
            await cancel()
    with contextlib.suppress(Exception):
        await forget_job(ctx)


# ----------------------------------------------------------------------------- progress


async def report(ctx: NodeContext, fraction: float) -> None:
    """Progress 0..1 of the wait, to WebSocket subscribers as ``node.progress`` (the engine
    keeps at most one a second); a provider's progress never reaches 1 before the output is
    downloaded."""
    await ctx.progress(min(0.99, max(0.0, fraction)))
