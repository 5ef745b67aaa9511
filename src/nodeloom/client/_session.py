"""What the resources and a bound run ask of the client that made them: requests to the
API, and its WebSocket address. ``AsyncClient`` (``_core.py``) is one; the resources
(``_resources.py``) and ``AsyncRun`` (``_runs.py``) sit below it and are handed it, so they
name this shape instead of importing the client back."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol, TypedDict, TypeVar, Unpack

import httpx
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


class RequestOptions(TypedDict, total=False):
    params: Mapping[str, Any] | None  # query parameters; None values are left out
    json: Any
    # A body streamed from its source: called anew for each attempt, so a retried request
    # sends it whole again (an upload read from a file).
    content: Callable[[], AsyncIterator[bytes]] | None
    headers: Mapping[str, str] | None
    auth: bool  # send the credential (default True)


class Session(Protocol):
    @property
    def ws_url(self) -> str: ...

    @property
    def auth_headers(self) -> dict[str, str]: ...

    async def request(
        self, method: str, path: str, **options: Unpack[RequestOptions]
    ) -> httpx.Response: ...

    def stream(
        self, method: str, path: str, **options: Unpack[RequestOptions]
    ) -> contextlib.AbstractAsyncContextManager[httpx.Response]: ...

    def paginate(
        self, path: str, model: type[M], params: Mapping[str, Any] | None = None
    ) -> AsyncIterator[M]: ...
