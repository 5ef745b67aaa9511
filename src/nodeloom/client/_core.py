"""The asynchronous client: one httpx connection pool, bounded retries, errors by problem code,
pagination. ``Client`` (``_sync.py``) runs this same code on a private event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, TypedDict, TypeVar, Unpack
from urllib.parse import parse_qs, urlsplit

import httpx
from pydantic import BaseModel, TypeAdapter

from nodeloom.client import _config
from nodeloom.client._resources import (
    AsyncApprovals,
    AsyncArtifacts,
    AsyncAssets,
    AsyncCallbacks,
    AsyncCredentials,
    AsyncKeys,
    AsyncRuns,
    AsyncSchedules,
    AsyncWebhooks,
    AsyncWorkflows,
)
from nodeloom.client._session import RequestOptions
from nodeloom.client.errors import APIError, ConnectionFailed, error_for
from nodeloom.schemas.accounts import AccountOut, TokenOut
from nodeloom.schemas.nodes import NodeTypeOut
from nodeloom.version import __version__

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

API = "/api/v1"
RETRY_STATUSES = frozenset({429, 503})

log = logging.getLogger("nodeloom.client")


def parse(model: type[T], data: Any) -> T:
    return TypeAdapter(model).validate_python(data)


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    text = response.text.strip()[:300]
    return {"detail": text or response.reason_phrase, "title": response.reason_phrase}


class ClientOptions(TypedDict, total=False):
    """Options of ``Client`` and ``AsyncClient`` besides ``url`` and ``api_key``."""

    timeout: float  # seconds per request (default 30)
    max_retries: int  # retries of a 429 or 503 answer (default 3)
    max_retry_wait: float  # longest Retry-After honoured, seconds (default 60)


def backoff_seconds(error: APIError, attempt: int) -> float:
    """How long to wait before retry ``attempt`` (0-based): the server's Retry-After, else
    exponential back-off from half a second."""
    if error.retry_after is not None:
        return error.retry_after
    return float(min(0.5 * 2**attempt, 8.0))


class AsyncClient:
    """An asynchronous Nodeloom client.

    ``url`` and ``api_key`` default to ``NODELOOM_URL`` / ``NODELOOM_API_KEY``, then to what
    ``nodeloom login`` stored (``api_key`` may also be a JWT). Answers 429 and 503 are
    retried up to ``max_retries`` times, waiting what ``Retry-After`` says, unless that is
    longer than ``max_retry_wait`` seconds; then the error is raised at once.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        target = _config.resolve(url, api_key)
        self.base_url = target.url
        self.credential_source = target.source
        self.options = options
        self.max_retries = options.get("max_retries", 3)
        self.max_retry_wait = options.get("max_retry_wait", 60.0)
        self._api_key = target.api_key
        self.token_expires_at: float | None = None  # set by login(): epoch seconds
        headers = {"User-Agent": f"nodeloom-client/{__version__}"}
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=options.get("timeout", 30.0),
            transport=transport,
        )
        self.workflows = AsyncWorkflows(self)
        self.runs = AsyncRuns(self)
        self.artifacts = AsyncArtifacts(self)
        self.assets = AsyncAssets(self)
        self.webhooks = AsyncWebhooks(self)
        self.schedules = AsyncSchedules(self)
        self.callbacks = AsyncCallbacks(self)
        self.approvals = AsyncApprovals(self)
        self.keys = AsyncKeys(self)
        self.credentials = AsyncCredentials(self)

    @classmethod
    async def login(
        cls, url: str | None, email: str, password: str, **options: Unpack[ClientOptions]
    ) -> AsyncClient:
        """A client authenticated with a fresh JWT (what API-key management needs)."""
        anonymous = cls(url, **options)
        try:
            response = await anonymous.request(
                "POST", "/auth/login", json={"email": email, "password": password}, auth=False
            )
        finally:
            await anonymous.aclose()
        token = parse(TokenOut, response.json())
        client = cls(anonymous.base_url, token.access_token, **options)
        client.token_expires_at = time.time() + token.expires_in
        return client

    # -- the account --------------------------------------------------------------------------

    async def me(self) -> AccountOut:
        """The account the credential belongs to: plan and credit balance."""
        return parse(AccountOut, (await self.request("GET", "/me")).json())

    async def node_types(self) -> list[NodeTypeOut]:
        """The node catalog: every type's inputs, params schema and price."""
        return parse(list[NodeTypeOut], (await self.request("GET", "/node-types")).json())

    # -- HTTP ---------------------------------------------------------------------------------

    @property
    def ws_url(self) -> str:
        scheme, rest = self.base_url.split("://", 1)
        return ("wss" if scheme == "https" else "ws") + "://" + rest + API + "/ws"

    @property
    def credential(self) -> str | None:
        """The bearer credential sent (an API key or a JWT)."""
        return self._api_key

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    async def request(
        self, method: str, path: str, **options: Unpack[RequestOptions]
    ) -> httpx.Response:
        """Send ``method`` to ``/api/v1{path}``; the answer, read, or the error it means."""
        async with self.stream(method, path, **options) as response:
            await response.aread()
        return response

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, path: str, **options: Unpack[RequestOptions]
    ) -> AsyncIterator[httpx.Response]:
        """Like ``request``, but the body is left unread for the caller to stream."""
        query = {k: v for k, v in (options.get("params") or {}).items() if v is not None}
        attempt = 0
        while True:
            request = self._http.build_request(
                method,
                API + path,
                params=query,
                json=options.get("json"),
                content=content() if (content := options.get("content")) else None,
                headers=options.get("headers"),
            )
            if not options.get("auth", True):
                request.headers.pop("Authorization", None)
            try:
                response = await self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                raise ConnectionFailed(f"cannot reach {self.base_url}: {exc!r}") from exc
            if not response.is_error:
                break
            try:
                await response.aread()
            finally:
                await response.aclose()
            error = error_for(response.status_code, _problem(response), response.headers)
            delay = backoff_seconds(error, attempt)
            if (
                response.status_code not in RETRY_STATUSES
                or attempt >= self.max_retries
                or delay > self.max_retry_wait
            ):
                raise error
            attempt += 1
            # A Retry-After of most of a minute would look like a hang: say what is awaited.
            log.log(
                logging.WARNING if delay >= 1 else logging.DEBUG,
                "%s %s: the server answered %s %s; asking again in %.0f s (retry %s of %s)",
                method,
                path,
                response.status_code,
                response.reason_phrase,
                delay,
                attempt,
                self.max_retries,
            )
            await asyncio.sleep(delay)
        try:
            yield response
        finally:
            await response.aclose()

    async def paginate(
        self, path: str, model: type[M], params: Mapping[str, Any] | None = None
    ) -> AsyncIterator[M]:
        """Every item of a paged list, newest first, following ``Link: rel="next"``."""
        query = dict(params or {})
        while True:
            response = await self.request("GET", path, params=query)
            for item in parse(list[model], response.json()):  # type: ignore[valid-type]
                yield item
            next_url = response.links.get("next", {}).get("url")
            if not next_url:
                return
            # Keep our own base URL (a proxy may rewrite the server's view of it).
            cursor = parse_qs(urlsplit(next_url).query).get("cursor")
            if not cursor:
                return
            query["cursor"] = cursor[0]

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
