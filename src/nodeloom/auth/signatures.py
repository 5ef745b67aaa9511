"""Webhook request signatures: ``X-Nodeloom-Signature: t=<unix>,v1=<hex>``.

``v1`` is the hex HMAC-SHA256, keyed with the webhook's secret, of ``f"{t}."`` followed by the
raw request body, byte for byte. ``t`` must be within TOLERANCE_SECONDS of the server clock,
so a captured request cannot be replayed later. Several ``v1=`` entries may be sent (while a
sender rotates secrets); one matching entry is enough. See docs/webhooks.md.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from nodeloom.errors import BadSignature

HEADER = "X-Nodeloom-Signature"
TOLERANCE_SECONDS = 300
_MAX_HEADER = 1024


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The header value a sender computes (also used by tests and the docs' example)."""
    return f"t={timestamp},v1={_digest(secret, body, timestamp)}"


def _digest(secret: str, body: bytes, timestamp: int) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def parse_header(value: str | None, now: float | None = None) -> tuple[int, list[str]]:
    """The timestamp and v1 signatures of a header, or BadSignature when the header is
    missing, malformed or outside the tolerance. Checked before the body is read."""
    if not value:
        raise BadSignature(f"This webhook requires a signed request ({HEADER}).")
    if len(value) > _MAX_HEADER:
        raise BadSignature(f"{HEADER} is malformed.")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in value.split(","):
        name, _, item = part.strip().partition("=")
        if name == "t" and item.isdigit() and len(item) <= 12:
            timestamp = int(item)
        elif name == "v1" and item:
            signatures.append(item.strip().lower())
    if timestamp is None or not signatures:
        raise BadSignature(f"{HEADER} must look like t=<unix seconds>,v1=<hex HMAC-SHA256>.")
    current = time.time() if now is None else now
    if abs(current - timestamp) > TOLERANCE_SECONDS:
        raise BadSignature(
            f"The signature timestamp is more than {TOLERANCE_SECONDS} s from the server clock."
        )
    return timestamp, signatures


def verify(secret: str, body: bytes, timestamp: int, signatures: list[str]) -> None:
    """Raise BadSignature unless one of ``signatures`` matches (constant-time compare)."""
    expected = _digest(secret, body, timestamp).encode()
    matched = False
    for candidate in signatures:
        # No early exit: every candidate is compared.
        matched |= hmac.compare_digest(expected, candidate.encode("utf-8", "replace"))
    if not matched:
        raise BadSignature("The webhook signature does not match the request body.")
