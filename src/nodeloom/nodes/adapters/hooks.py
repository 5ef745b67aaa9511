"""Provider webhooks (Replicate's, today): the URL a node run hands its provider, and how a
delivery to it is checked. Pure functions; the route is api/routes/provider_hooks.py, the
wait nodes/adapters/replicate.py.

- **Where**: ``{NODELOOM_BASE_URL}/api/v1/provider-hooks/{provider}/{token}``, only when the
  base URL is set and a provider could reach it: a host that is ``localhost``, a name of one
  label (``nodeloom``, a container's) or a loopback, private or link-local address literal
  is not used unless ``NODELOOM_HTTP_ALLOWLIST`` names it (how the tests point a fake
  provider on 127.0.0.1 at the server).
- **Token**: the node run (run id and node id, base64url) and an HMAC-SHA256 of it, the
  provider and a purpose with the server secret, compared in constant time. It names one node
  run and cannot be made up; it is not a credential to anything but this route.
- **Signature**: Standard Webhooks, as Replicate signs them: ``webhook-id``,
  ``webhook-timestamp`` (unix seconds, within ``TOLERANCE_SECONDS`` of our clock) and
  ``webhook-signature`` (space-separated ``v1,<base64>``), each an HMAC-SHA256 of
  ``f"{id}.{timestamp}.{body}"`` keyed with the base64 part of the account's ``whsec_``
  secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import time
from collections.abc import Mapping
from typing import Any

import httpx

from nodeloom.nodes.http import Allowlist, is_public
from nodeloom.settings import Settings

ROUTE = "/api/v1/provider-hooks"
TOKEN_PURPOSE = b"nodeloom-provider-hook"
MAC_CHARS = 43  # the whole HMAC-SHA256, base64url without padding
TOKEN_MAX = 400  # characters: a run id and a node id of up to 200 characters, encoded
TOLERANCE_SECONDS = 300
HEADER_MAX = 2048  # characters of a signature header (a few v1 entries while rotating)
LOGS_KEPT = 4000  # characters of a delivered prediction's logs kept (progress is at the end)


class BadDelivery(ValueError):
    """The delivery's signature headers are missing, malformed, stale or do not match."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, provider: str, run_id: str, node_id: str) -> str:
    message = b"\n".join([TOKEN_PURPOSE, provider.encode(), run_id.encode(), node_id.encode()])
    return _b64(hmac.new(secret, message, hashlib.sha256).digest())


def token_for(secret: bytes, provider: str, run_id: str, node_id: str) -> str:
    who = _b64(f"{run_id}\n{node_id}".encode())
    return f"{who}.{_mac(secret, provider, run_id, node_id)}"


def node_run_of(secret: bytes, provider: str, token: str) -> tuple[str, str] | None:
    """(run id, node id) a token names, or None when it is malformed or was not made here."""
    if len(token) > TOKEN_MAX:
        return None
    who, dot, mac = token.partition(".")
    if not dot or len(mac) != MAC_CHARS:
        return None
    try:
        run_id, newline, node_id = _unb64(who).decode("utf-8").partition("\n")
    except (binascii.Error, ValueError):
        return None
    if not newline or not run_id or not node_id:
        return None
    expected = _mac(secret, provider, run_id, node_id)
    if not hmac.compare_digest(expected.encode(), mac.encode("ascii", "replace")):
        return None
    return run_id, node_id


def reachable_base(settings: Settings) -> str | None:
    """The server's public base URL when a provider could call it, else None (poll only)."""
    base = (settings.base_url or "").rstrip("/")
    if not base:
        return None
    try:
        host = httpx.URL(base).host
    except httpx.InvalidURL:
        return None
    allow = Allowlist.from_settings(settings)
    if allow.names(host):
        return base
    if host.lower().rstrip(".") in ("localhost", "localhost.localdomain") or host.endswith(
        ".localhost"
    ):
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        # A dotted name: whoever set it says it is the public address. A single label
        # (a container's or an intranet name, "testserver") is no address on the internet.
        return base if "." in host.strip(".") else None
    return base if is_public(ip) or allow.contains(ip) else None


def hook_url(settings: Settings, provider: str, run_id: str, node_id: str) -> str | None:
    base = reachable_base(settings)
    if base is None:
        return None
    return f"{base}{ROUTE}/{provider}/{token_for(settings.secret, provider, run_id, node_id)}"


# ----------------------------------------------------------------------------- signatures


def signature_headers(headers: Mapping[str, str], now: float | None = None) -> tuple[str, int]:
    """(webhook-id, timestamp) of a delivery, checked before its body is read: BadDelivery
    when a header is missing or malformed or the timestamp is outside the tolerance (a
    replayed delivery, or a clock far off)."""
    webhook_id = headers.get("webhook-id") or ""
    stamp = headers.get("webhook-timestamp") or ""
    signature = headers.get("webhook-signature") or ""
    if not webhook_id or not stamp or not signature:
        raise BadDelivery(
            "A signed delivery is required (webhook-id, webhook-timestamp, webhook-signature)."
        )
    if len(webhook_id) > 256 or len(signature) > HEADER_MAX:
        raise BadDelivery("The webhook signature headers are malformed.")
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12:
        raise BadDelivery("webhook-timestamp must be unix seconds.")
    current = time.time() if now is None else now
    if abs(current - int(stamp)) > TOLERANCE_SECONDS:
        raise BadDelivery(
            f"The webhook timestamp is more than {TOLERANCE_SECONDS} s from the server clock."
        )
    return webhook_id, int(stamp)


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadDelivery("the stored signing secret is malformed") from exc


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature (what the provider sends; tests use it too)."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return (
        "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()
    )


def verify(secret: str, webhook_id: str, timestamp: int, body: bytes, header: str) -> None:
    """BadDelivery unless one ``v1`` entry of ``header`` signs this delivery (every entry is
    compared, in constant time)."""
    expected = sign(secret, webhook_id, timestamp, body).partition(",")[2].encode()
    matched = False
    for entry in header.split():
        version, _, value = entry.partition(",")
        if version == "v1":
            matched |= hmac.compare_digest(expected, value.encode("ascii", "replace"))
    if not matched:
        raise BadDelivery("The webhook signature does not match the delivery.")


def delivered_state(prediction: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a delivered prediction: what the waiting node reads (its status, output,
    error, the end of its logs, its metrics); not its input (our own data URIs)."""
    logs = prediction.get("logs")
    return {
        "status": prediction.get("status"),
        "output": prediction.get("output"),
        "error": prediction.get("error"),
        "logs": logs[-LOGS_KEPT:] if isinstance(logs, str) else None,
        "metrics": prediction.get("metrics") if isinstance(prediction.get("metrics"), dict) else {},
    }
