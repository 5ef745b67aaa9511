"""A client of a ComfyUI server's HTTP and WebSocket protocol (what its web UI speaks).

- ``POST /upload/image`` (multipart ``image``, ``overwrite``, ``type=input``) stores an input
  image on the server; its answer ``{name, subfolder, type}`` names it for a ``LoadImage``.
- ``POST /prompt`` ``{"prompt": <API-format workflow>, "client_id": ...}`` queues a prompt;
  the answer carries ``prompt_id``; a refused prompt answers 400 with ``error`` and
  ``node_errors``.
- ``GET /ws?clientId=...`` streams JSON messages to the client that queued the prompt:
  ``execution_start``, ``execution_cached`` ``{nodes}``, ``executing`` ``{node}`` (``node``
  null: the prompt is done), ``progress`` ``{value, max, node}``, ``executed`` ``{node,
  output}``, ``execution_success``, ``execution_error`` ``{node_id, node_type,
  exception_type, exception_message}``, ``execution_interrupted``; binary frames are
  previews, ignored here.
- ``GET /history/{prompt_id}`` is ``{}`` until the prompt ends, then ``{prompt_id:
  {outputs: {node: {images: [{filename, subfolder, type}]}}, status: {status_str,
  completed, messages}}}``; ``GET /queue`` lists the running and pending prompts;
  ``GET /view?filename=&subfolder=&type=`` returns an output file.
- ``POST /interrupt`` ``{"prompt_id"}`` stops the running prompt (only if it is that one);
  ``POST /queue`` ``{"delete": [prompt_id]}`` removes a pending one.

The server's address is a tenant's (a ``comfyui`` credential), so every connection, HTTP or
WebSocket, goes to an address checked by the SSRF guard of ``HttpRequest``, unless the
operator's allow-list names it. Redirects are not followed. The credential's secret travels
only in the ``Authorization`` header, and never appears in an error.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from nodeloom.nodes.base import NodeFailure
from nodeloom.nodes.http import Allowlist, IPAddress, checked_addresses

CODE = "provider_error"
MESSAGE_MAX = 64 * 1024 * 1024  # a WebSocket message (JSON status; previews are skipped)
ERROR_QUOTE = 500  # characters of a provider's error quoted in a node failure


class ComfyUIError(NodeFailure):
    """The ComfyUI server refused or failed; the message quotes it."""

    def __init__(self, message: str, code: str = CODE) -> None:
        super().__init__(message, code)


def auth_headers(secret: Mapping[str, str | None]) -> dict[str, str]:
    """The ``Authorization`` header of a comfyui credential: bearer or basic, or none."""
    token = secret.get("bearer_token")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = secret.get("username"), secret.get("password")
    if user and password:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return {"Authorization": f"Basic {pair}"}
    return {}


class ComfyUIClient:
    """One ComfyUI server, reached through the address check. Use as an async context."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        guard: Allowlist | None,
        *,
        timeout: float = 30.0,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.base = httpx.URL(base_url.rstrip("/") + "/")
        self.headers = dict(headers)
        self.guard = guard
        self.timeout = timeout
        self._secrets = tuple(s for s in secrets if s)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), trust_env=False, follow_redirects=False
        )
        self._addresses: list[IPAddress] | None = None

    async def __aenter__(self) -> ComfyUIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    def url(self, path: str) -> httpx.URL:
        return self.base.join(path.lstrip("/"))

    def _blank(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    async def _targets(self) -> list[IPAddress] | None:
        """The checked addresses of the server (None: no guard, connect by name)."""
        if self.guard is None:
            return None
        if self._addresses is None:
            self._addresses = await checked_addresses(self.base, self.guard)
        return self._addresses

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, connected to a checked address; the body read."""
        response = await self._send(method, path, stream=False, **kwargs)
        return response

    @contextlib.asynccontextmanager
    async def stream(self, method: str, path: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        response = await self._send(method, path, stream=True, **kwargs)
        try:
            yield response
        finally:
            await response.aclose()

    async def _send(self, method: str, path: str, *, stream: bool, **kwargs: Any) -> httpx.Response:
        url = self.url(path)
        targets = await self._targets()
        if targets is None:
            request = self._client.build_request(method, url, headers=self.headers, **kwargs)
            return await self._client.send(request, stream=stream)
        for index, ip in enumerate(targets):
            request = self._pinned(method, url, ip, **kwargs)
            try:
                return await self._client.send(request, stream=stream)
            except httpx.ConnectError:
                if index == len(targets) - 1:
                    raise
        raise ComfyUIError(f"host {url.host!r} has no address")  # pragma: no cover

    def _pinned(self, method: str, url: httpx.URL, ip: IPAddress, **kwargs: Any) -> httpx.Request:
        host = url.host
        default_port = 443 if url.scheme == "https" else 80
        shown = f"[{host}]" if ":" in host else host
        host_header = shown if url.port in (None, default_port) else f"{shown}:{url.port}"
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        return self._client.build_request(
            method,
            url.copy_with(host=str(ip)),
            headers={**self.headers, "Host": host_header},
            extensions=extensions,
            **kwargs,
        )

    def failure(self, what: str, response: httpx.Response) -> ComfyUIError:
        """The server's refusal, quoted (its ``error.message`` and node errors if any)."""
        detail = response.text
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            detail = describe_refusal(body) or detail
        detail = self._blank(detail.strip())[:ERROR_QUOTE]
        return ComfyUIError(f"ComfyUI refused {what} (HTTP {response.status_code}): {detail}")

    # ------------------------------------------------------------------ the calls

    async def upload_image(self, name: str, data: bytes) -> str:
        """Store ``data`` as an input image; the value a ``LoadImage`` ``image`` input takes."""
        response = await self.request(
            "POST",
            "upload/image",
            files={"image": (name, data, "image/png")},
            data={"overwrite": "true", "type": "input"},
        )
        if response.status_code != 200:
            raise self.failure("the image upload", response)
        body = _json_object(response, "the image upload")
        stored = body.get("name")
        if not isinstance(stored, str) or not stored:
            raise ComfyUIError("ComfyUI's answer to the image upload names no file")
        subfolder = body.get("subfolder")
        return f"{subfolder}/{stored}" if isinstance(subfolder, str) and subfolder else stored

    async def submit(self, prompt: Mapping[str, Any], client_id: str, prompt_id: str) -> str:
        """Queue ``prompt`` as ``prompt_id``; the id the server answers (an older server
        ignores the caller's and makes its own)."""
        body = {"prompt": prompt, "client_id": client_id, "prompt_id": prompt_id}
        response = await self.request("POST", "prompt", json=body)
        if response.status_code != 200:
            raise self.failure("the workflow", response)
        answered = _json_object(response, "the workflow").get("prompt_id")
        if not isinstance(answered, str) or not answered:
            raise ComfyUIError("ComfyUI's answer to the workflow has no prompt_id")
        return answered

    async def history(self, prompt_id: str) -> dict[str, Any] | None:
        """The history entry of a finished prompt; None while it is queued or running."""
        response = await self.request("GET", f"history/{prompt_id}")
        if response.status_code != 200:
            raise self.failure("the history request", response)
        entry = _json_object(response, "the history request").get(prompt_id)
        return entry if isinstance(entry, dict) else None

    async def queued(self, prompt_id: str) -> bool:
        """Whether ``prompt_id`` is running or waiting in the server's queue."""
        response = await self.request("GET", "queue")
        if response.status_code != 200:
            raise self.failure("the queue request", response)
        body = _json_object(response, "the queue request")
        for key in ("queue_running", "queue_pending"):
            for item in body.get(key) or []:
                if isinstance(item, list) and len(item) > 1 and item[1] == prompt_id:
                    return True
        return False

    async def download(self, ref: Mapping[str, Any], dest: Path, limit: int) -> int:
        """An output file (``{filename, subfolder, type}`` of the history) streamed to
        ``dest``, refused beyond ``limit`` bytes whatever the server declares; its size."""
        params = {
            "filename": str(ref.get("filename", "")),
            "subfolder": str(ref.get("subfolder", "")),
            "type": str(ref.get("type", "output")),
        }
        async with self.stream("GET", "view", params=params) as response:
            if response.status_code != 200:
                await response.aread()
                raise self.failure(f"the output {params['filename']!r}", response)
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise NodeFailure(
                    f"ComfyUI's output {params['filename']!r} is {int(declared):,} bytes, "
                    f"over the {limit:,} byte limit",
                    "output_too_large",
                )
            size = 0
            with dest.open("wb") as out:
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise NodeFailure(
                            f"ComfyUI's output {params['filename']!r} exceeds the {limit:,} "
                            "byte limit",
                            "output_too_large",
                        )
                    await asyncio.to_thread(out.write, chunk)
        return size

    async def cancel(self, prompt_id: str) -> None:
        """Stop ``prompt_id``: interrupt it if it runs, delete it if it waits. Best effort
        (the run is cancelled whatever the server says)."""
        for path, payload in (
            ("interrupt", {"prompt_id": prompt_id}),
            ("queue", {"delete": [prompt_id]}),
        ):
            with contextlib.suppress(httpx.HTTPError, NodeFailure):
                await self.request("POST", path, json=payload)

    @contextlib.asynccontextmanager
    async def websocket(self, client_id: str) -> AsyncIterator[ClientConnection]:
        """The server's message stream for ``client_id``, connected to a checked address."""
        ws_url = self.url("ws").copy_merge_params({"clientId": client_id})
        scheme = "wss" if ws_url.scheme == "https" else "ws"
        uri = str(ws_url.copy_with(scheme=scheme))
        targets = await self._targets()
        kwargs: dict[str, Any] = {
            "additional_headers": self.headers,
            "max_size": MESSAGE_MAX,
            "open_timeout": self.timeout,
            "close_timeout": 2,
            "proxy": None,
        }
        if targets is not None:
            kwargs["host"] = str(targets[0])
            kwargs["port"] = ws_url.port or (443 if scheme == "wss" else 80)
            if scheme == "wss":
                kwargs["ssl"] = ssl.create_default_context()
                kwargs["server_hostname"] = ws_url.host
        async with websockets.connect(uri, **kwargs) as connection:
            yield connection


def describe_refusal(body: Mapping[str, Any]) -> str:
    """ComfyUI's 400 answer to a prompt, in one line: its error and each node's errors."""
    parts: list[str] = []
    error = body.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        details = error.get("details")
        if isinstance(message, str):
            parts.append(message + (f": {details}" if isinstance(details, str) and details else ""))
    elif isinstance(error, str):
        parts.append(error)
    node_errors = body.get("node_errors")
    if isinstance(node_errors, dict):
        for node_id, info in node_errors.items():
            if not isinstance(info, dict):
                continue
            messages = [
                str(e.get("details") or e.get("message"))
                for e in info.get("errors") or []
                if isinstance(e, dict)
            ]
            kind = info.get("class_type", "")
            parts.append(f"node {node_id} ({kind}): {'; '.join(messages)}")
    return "; ".join(parts)


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError) as exc:
        raise ComfyUIError(f"ComfyUI answered {what} with invalid JSON") from exc
    if not isinstance(body, dict):
        raise ComfyUIError(f"ComfyUI answered {what} with unexpected JSON")
    return body
