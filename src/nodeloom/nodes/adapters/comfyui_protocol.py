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
operator's allow-list names it (HTTP through the adapters' ``policy.Provider``). The
credential's secret travels only in the ``Authorization`` header, and never appears in an
error.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from nodeloom import masking
from nodeloom.nodes.adapters import policy
from nodeloom.nodes.adapters.policy import ProviderError
from nodeloom.nodes.http import checked_addresses
from nodeloom.sdk._node import NodeFailure
from nodeloom.settings import Settings

CREDENTIAL_KIND = "comfyui"
MESSAGE_MAX = 64 * 1024 * 1024  # a WebSocket message (JSON status; previews are skipped)
ERROR_QUOTE = 500  # characters of a provider's error quoted in a node failure


def auth_headers(credential: policy.Credential) -> dict[str, str]:
    """The ``Authorization`` header of a comfyui credential: bearer or basic, or none."""
    token = credential.value("bearer_token")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = credential.value("username"), credential.value("password")
    if user and password:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return {"Authorization": f"Basic {pair}"}
    return {}


class ComfyUIClient:
    """One ComfyUI server, over the adapters' ``Provider`` (address check, retries of
    429/5xx honouring Retry-After, the provider's words quoted with secrets masked)."""

    def __init__(self, api: policy.Provider) -> None:
        self.api = api

    async def upload_image(self, name: str, data: bytes) -> str:
        """Store ``data`` as an input image; the value a ``LoadImage`` ``image`` input takes.
        (Idempotent: the same name, overwritten with the same bytes.)"""
        form = httpx.Request(
            "POST",
            "http://comfyui/upload/image",
            files={"image": (name, data, "image/png")},
            data={"overwrite": "true", "type": "input"},
        )
        content = form.read()
        body = await self.api.json(
            "POST",
            "upload/image",
            content=content,
            headers={"Content-Type": form.headers["Content-Type"]},
        )
        stored = body.get("name")
        if not isinstance(stored, str) or not stored:
            raise ProviderError("ComfyUI's answer to the image upload names no file")
        subfolder = body.get("subfolder")
        return f"{subfolder}/{stored}" if isinstance(subfolder, str) and subfolder else stored

    async def submit(self, prompt: Mapping[str, Any], client_id: str, prompt_id: str) -> str:
        """Queue ``prompt`` as ``prompt_id``; the id the server answers (an older server
        ignores the caller's and makes its own). A refused prompt fails with ComfyUI's
        error and each node's errors quoted."""
        body = {"prompt": prompt, "client_id": client_id, "prompt_id": prompt_id}
        response = await self.api.request(
            "POST", "prompt", json_body=body, idempotent=False, ok=lambda s: s < 400 or s == 400
        )
        if response.status_code == 400:
            try:
                refusal = response.json()
            except ValueError:
                refusal = {}
            detail = describe_refusal(refusal) if isinstance(refusal, dict) else ""
            detail = self.api.mask(detail or response.text.strip())[:ERROR_QUOTE]
            raise ProviderError(f"ComfyUI refused the workflow (HTTP 400): {detail}", 400)
        try:
            answered = response.json().get("prompt_id")
        except (ValueError, AttributeError):
            answered = None
        if not isinstance(answered, str) or not answered:
            raise ProviderError("ComfyUI's answer to the workflow has no prompt_id")
        return answered

    async def history(self, prompt_id: str) -> dict[str, Any] | None:
        """The history entry of a finished prompt; None while it is queued or running."""
        entry = (await self.api.json("GET", f"history/{prompt_id}")).get(prompt_id)
        return entry if isinstance(entry, dict) else None

    async def queued(self, prompt_id: str) -> bool:
        """Whether ``prompt_id`` is running or waiting in the server's queue."""
        body = await self.api.json("GET", "queue")
        for key in ("queue_running", "queue_pending"):
            for item in body.get(key) or []:
                if isinstance(item, list) and len(item) > 1 and item[1] == prompt_id:
                    return True
        return False

    def view_url(self, ref: Mapping[str, Any]) -> str:
        """Where an output file (``{filename, subfolder, type}`` of the history) is served."""
        query = urllib.parse.urlencode(
            {
                "filename": str(ref.get("filename", "")),
                "subfolder": str(ref.get("subfolder", "")),
                "type": str(ref.get("type", "output")),
            }
        )
        return self.api.url(f"view?{query}")

    async def cancel(self, prompt_id: str) -> None:
        """Stop ``prompt_id``: interrupt it if it runs, delete it if it waits. Best effort
        (the run is cancelled whatever the server says)."""
        for path, payload in (
            ("interrupt", {"prompt_id": prompt_id}),
            ("queue", {"delete": [prompt_id]}),
        ):
            with contextlib.suppress(httpx.HTTPError, NodeFailure):
                await self.api.request("POST", path, json_body=payload)

    @contextlib.asynccontextmanager
    async def websocket(self, client_id: str) -> AsyncIterator[ClientConnection]:
        """The server's message stream for ``client_id``, connected to a checked address
        (the same guard as every HTTP request), with the credential's header."""
        ws_url = httpx.URL(self.api.url("ws")).copy_merge_params({"clientId": client_id})
        scheme = "wss" if ws_url.scheme == "https" else "ws"
        targets = await checked_addresses(ws_url, self.api.guard)
        kwargs: dict[str, Any] = {
            "additional_headers": self.api.headers,
            "max_size": MESSAGE_MAX,
            "open_timeout": 10,
            "close_timeout": 2,
            "proxy": None,
            "host": str(targets[0]),
            "port": ws_url.port or (443 if scheme == "wss" else 80),
        }
        if scheme == "wss":
            kwargs["ssl"] = ssl.create_default_context()
            kwargs["server_hostname"] = ws_url.host
        async with websockets.connect(str(ws_url.copy_with(scheme=scheme)), **kwargs) as ws:
            yield ws


TEST_TIMEOUT = 10.0  # seconds, for a credential's connection test


async def check(settings: Settings, credential: policy.Credential) -> tuple[bool, int | None, str]:
    """A comfyui credential's connection test: ``GET {base_url}/system_stats`` (the
    cheapest call; a proxy in front checks the credential on it) through the address check,
    within ``TEST_TIMEOUT``. (ok, HTTP status, message), the server's words quoted. A fleet
    (``servers``) is ok when every server answers, each named in the message; the shared
    pool is the operator's, and is only said to be configured or not."""
    if credential.fields.get("shared_pool") is True:
        count = len(settings.comfyui_pool)
        if not count:
            return False, None, "this server has no shared ComfyUI pool"
        return True, None, f"the shared pool has {count} server{'s' if count != 1 else ''}"
    servers = credential.fields.get("servers")
    if isinstance(servers, list) and servers:
        results = await asyncio.gather(
            *(_check_one(settings, credential, str(s.get("base_url", ""))) for s in servers)
        )
        said = "; ".join(
            f"{s.get('name') or s.get('base_url')}: {message}"
            for s, (_, _, message) in zip(servers, results, strict=True)
        )
        failed = [r for r in results if not r[0]]
        return not failed, failed[0][1] if failed else 200, said[:1000]
    return await _check_one(settings, credential, credential.value("base_url") or "")


async def _check_one(
    settings: Settings, credential: policy.Credential, base_url: str
) -> tuple[bool, int | None, str]:
    secrets = tuple(credential.secret.values())
    try:
        async with (
            asyncio.timeout(TEST_TIMEOUT),
            policy.Provider.waited_on(
                settings,
                name="ComfyUI",
                base_url=base_url,
                headers=auth_headers(credential),
                secrets=secrets,
            ) as api,
        ):
            response = await api.request("GET", "system_stats", ok=lambda _status: True)
    except TimeoutError:
        return False, None, f"ComfyUI did not answer within {TEST_TIMEOUT:g} s"
    except NodeFailure as exc:
        return False, None, masking.mask(exc.message, secrets)
    except httpx.HTTPError as exc:
        return False, None, f"cannot reach ComfyUI ({type(exc).__name__})"
    if not response.is_success:  # a redirect is not followed, so it is no answer either
        refused = api.refused(response)
        return False, response.status_code, refused.message
    try:
        devices = response.json().get("devices") or []
        names = ", ".join(str(d.get("name")) for d in devices if isinstance(d, dict))
    except (ValueError, AttributeError):
        names = ""
    message = "ComfyUI answered" + (f" (devices: {names[:200]})" if names else "")
    return True, response.status_code, message


def describe_refusal(body: Mapping[str, Any]) -> str:
    """ComfyUI's 400 answer to a prompt, in one line: its error, then each node's errors
    as ComfyUI words them (``Required input is missing: width``). When nodes are listed,
    the error's own ``details`` only repeats their lines, so it is left out."""
    parts: list[str] = []
    node_parts: list[str] = []
    node_errors = body.get("node_errors")
    if isinstance(node_errors, dict):
        for node_id, info in node_errors.items():
            if not isinstance(info, dict):
                continue
            messages = [
                _said(e.get("message"), e.get("details"))
                for e in info.get("errors") or []
                if isinstance(e, dict)
            ]
            kind = info.get("class_type", "")
            node_parts.append(f"node {node_id} ({kind}): {'; '.join(m for m in messages if m)}")
    error = body.get("error")
    if isinstance(error, dict):
        details = None if node_parts else error.get("details")
        said = _said(error.get("message"), details)
        if said:
            parts.append(said)
    elif isinstance(error, str):
        parts.append(error)
    return "; ".join(parts + node_parts)


def _said(message: Any, details: Any) -> str:
    """``message: details`` as ComfyUI prints them (either may be missing)."""
    said = [str(x).strip() for x in (message, details) if isinstance(x, str) and x.strip()]
    if len(said) == 2:
        return f"{said[0].rstrip('.')}: {'; '.join(said[1].splitlines())}"
    return said[0] if said else ""
