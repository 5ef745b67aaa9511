"""Run inputs that bring their media by reference: an https URL or a ``data:`` URI.

A value of the run's input (an execute's, or a webhook trigger's body) for a key that an
``ImageInput``, ``AudioInput`` or ``VideoInput`` of the workflow reads may be, besides an
asset or artifact id, a URL or a data URI. Before
the run is created, each is received exactly as an upload is (streamed to the scratch space
under the plan's file size, kind read from the content, converted, deduplicated, counted
against the storage quota) and the key then holds the new asset's id, so the run, its
record and its cache key see an id as for any other asset.

URLs go through the HttpRequest node's guard (nodes/http.py): the host's addresses are
checked and connected to as checked, every redirect again, the body is streamed and cut at
the plan's size after decompression, and the whole fetch is bounded by
``http_timeout_seconds``. Plain ``http`` is taken only for a host the allow-list names (the
operator's own network); anything else must be https. The answer's Content-Type is not
trusted: the content decides, as for uploads.

Errors are answered before any run exists: 400 ``invalid_request`` (pointer
``/input/<key>``) for a malformed URL or data URI, 422 ``media_fetch_failed`` for a URL that
could not be fetched (a refused address, no answer, an error status), and the upload's own
413 / 415 / 422 / 402 for a file too large, not media, damaged, or over the quota.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import urllib.parse
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from nodeloom.api.state import AppContext
from nodeloom.api.uploads import receive_stream
from nodeloom.auth.principal import Principal
from nodeloom.errors import FieldError, InvalidRequest, MediaFetchFailed, PayloadTooLarge
from nodeloom.nodes import http
from nodeloom.nodes.media_inputs import MEDIA_INPUT_TYPES
from nodeloom.nodes.sniff import HEAD_BYTES
from nodeloom.schemas.runs import ExecuteRequest
from nodeloom.sdk._node import NodeFailure
from nodeloom.settings import Settings
from nodeloom.store import workflows as workflow_store
from nodeloom.uploads.accept import Ingestion, accept, plan_limits, work_folder
from nodeloom.uploads.received import ReceivedFile

_SCHEMES = ("https://", "http://", "data:")


def media_keys(graph: Mapping[str, Any] | None) -> set[str]:
    """The run-input keys the graph's media input nodes read."""
    keys: set[str] = set()
    nodes = (graph or {}).get("nodes")
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, dict) or node.get("type") not in MEDIA_INPUT_TYPES:
            continue
        data = node.get("data")
        key = data.get("key") if isinstance(data, dict) else None
        if isinstance(key, str) and key:
            keys.add(key)
    return keys


def is_reference(value: Any) -> bool:
    """A value that names media by URL or data URI (not an id)."""
    return isinstance(value, str) and value[:8].lower().startswith(_SCHEMES)


async def bring_media(
    ctx: AppContext, principal: Principal, workflow_id: str, body: ExecuteRequest
) -> ExecuteRequest:
    """``body`` with each URL or data URI its media input keys hold made an asset of the
    account, and the key its id (``bring_input_media``)."""
    if body.input is None:
        return body
    resolved = await bring_input_media(
        ctx, principal.account_id, str(principal.plan), workflow_id, body.input
    )
    return body if resolved is body.input else body.model_copy(update={"input": resolved})


async def bring_input_media(
    ctx: AppContext, account_id: str, plan: str, workflow_id: str, run_input: dict[str, Any]
) -> dict[str, Any]:
    """``run_input`` with each URL or data URI its media input keys hold made an asset of
    the account, and the key its id; the same object when there is none. Nothing is read
    when no value looks like one; a key no media input node of the workflow reads is left
    as it is (a TextInput may well take a URL as text)."""
    candidates = {k for k, v in run_input.items() if is_reference(v)}
    if not candidates:
        return run_input
    row = await ctx.db.read(lambda c: workflow_store.get(c, account_id, workflow_id))
    keys = sorted(candidates & media_keys(row.graph_json if row is not None else None))
    if not keys:
        return run_input  # an unknown workflow is answered 404 by the run's acceptance
    limits = plan_limits(ctx.settings, plan)
    services = Ingestion(ctx.settings, ctx.db, ctx.store, ctx.sandbox)
    resolved = dict(run_input)
    async with work_folder(ctx.scratch) as work_dir:
        for key in keys:
            received = await receive_reference(
                ctx.settings, key, run_input[key], work_dir, limits.file_bytes
            )
            name = received.filename or key
            accepted = await accept(services, account_id, plan, received, name, work_dir)
            resolved[key] = accepted.asset.id
    return resolved


def _invalid(key: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, errors=[FieldError(f"/input/{key}", message)])


async def receive_reference(
    settings: Settings, key: str, value: str, directory: Path, max_bytes: int
) -> ReceivedFile:
    """The file ``value`` names (a URL or a data URI), received into ``directory``."""
    if value[:5].lower() == "data:":
        return await asyncio.to_thread(_receive_data_uri, key, value, directory, max_bytes)
    return await _receive_url(settings, key, value, directory, max_bytes)


def _receive_data_uri(key: str, value: str, directory: Path, max_bytes: int) -> ReceivedFile:
    header, comma, payload = value.partition(",")
    if not comma:
        raise _invalid(key, "a data: URI needs a comma before its data")
    base64_encoded = header.lower().endswith(";base64")
    if (len(payload) * 3 // 4 if base64_encoded else len(payload) // 3) > max_bytes:
        raise PayloadTooLarge(
            f"The file is larger than {max_bytes} bytes, the most this account may upload at once.",
            extra={"limit": max_bytes},
        )
    try:
        if base64_encoded:
            data = base64.b64decode(payload, validate=True)
        else:
            data = urllib.parse.unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as exc:
        raise _invalid(key, "the data: URI's base64 is malformed") from exc
    if not data:
        raise _invalid(key, "the data: URI holds no data")
    if len(data) > max_bytes:
        raise PayloadTooLarge(
            f"The file is larger than {max_bytes} bytes, the most this account may upload at once.",
            extra={"limit": max_bytes},
        )
    received = ReceivedFile(directory / f"data-{uuid.uuid4().hex}", key, key)
    received.path.write_bytes(data)
    received.size, received.sha256 = len(data), hashlib.sha256(data).hexdigest()
    received.head = data[:HEAD_BYTES]
    return received


def _checked_url(settings: Settings, key: str, value: str) -> httpx.URL:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise _invalid(key, f"not a valid URL: {exc}") from exc
    if not url.host:
        raise _invalid(key, "the URL has no host")
    if url.scheme == "http" and not _allowed_plain(settings, url.host):
        raise _invalid(key, "media URLs must be https")
    return url


def _allowed_plain(settings: Settings, host: str) -> bool:
    """Plain http only for a host the allow-list names, or an address in one of its
    networks: the operator's own network, where https may not be set up."""
    allow = http.Allowlist.from_settings(settings)
    if allow.names(host):
        return True
    try:
        return allow.contains(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return False


def _file_name(url: httpx.URL, key: str) -> str:
    last = urllib.parse.unquote(url.path.rsplit("/", 1)[-1]).strip()
    return last[:255] or key


async def _receive_url(
    settings: Settings, key: str, value: str, directory: Path, max_bytes: int
) -> ReceivedFile:
    url = _checked_url(settings, key, value)
    received = ReceivedFile(directory / f"url-{uuid.uuid4().hex}", key, _file_name(url, key))

    async def read(response: httpx.Response, final: httpx.URL) -> ReceivedFile:
        if not 200 <= response.status_code < 300:
            raise MediaFetchFailed(
                f"Input {key!r}: {final.host} answered HTTP {response.status_code}.",
                extra={"upstream_status": response.status_code},
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise PayloadTooLarge(
                f"Input {key!r}: the file is {int(declared)} bytes, over the {max_bytes} this "
                "account may upload at once.",
                extra={"limit": max_bytes},
            )
        await receive_stream(response.aiter_bytes(), received, max_bytes)
        return received

    try:
        async with asyncio.timeout(settings.http_timeout_seconds):
            return await http.exchange(settings, "GET", str(url), {"Accept": "*/*"}, None, read)
    except TimeoutError as exc:
        raise MediaFetchFailed(
            f"Input {key!r}: {url.host} did not send the file within "
            f"{settings.http_timeout_seconds:g} s."
        ) from exc
    except NodeFailure as exc:
        raise MediaFetchFailed(f"Input {key!r}: {exc}", extra={"reason": exc.code}) from exc
    except httpx.HTTPError as exc:
        raise MediaFetchFailed(
            f"Input {key!r}: the download from {url.host} broke off ({type(exc).__name__})."
        ) from exc
