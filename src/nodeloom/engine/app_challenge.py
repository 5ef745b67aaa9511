"""Proof of work for apps: a cost a visitor's browser pays for each run, with no third party.

An app with ``challenge_bits`` set hands out a challenge with its form: a token the server
signed (the app, an expiry, the difficulty and a random nonce, under an HMAC with the server
secret), so issuing one stores nothing. To start a run the visitor sends the token and a
solution: any string such that SHA-256 of ``"<token>:<solution>"`` starts with at least
``bits`` zero bits — about ``2 ** bits`` hashes to find, one to check. The server checks the
signature, the app, the expiry and the difficulty here (pure, no I/O); the caller then marks
the nonce used in the database (``store.apps.use_challenge``), so one solution starts at most
one run, on every replica.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from nodeloom.auth.tokens import keyed_hash
from nodeloom.errors import ChallengeFailed
from nodeloom.timestamps import format_timestamp

ALGORITHM = "sha256-leading-zero-bits"
CHALLENGE_SECONDS = 600
_PURPOSE = "app-challenge"


def _sign(secret: bytes, payload: str) -> str:
    return keyed_hash(secret, payload, _PURPOSE)


def issue(secret: bytes, app_id: str, bits: int, now: datetime) -> dict[str, object]:
    """A fresh challenge for app ``app_id`` at difficulty ``bits``, as the form shows it."""
    expires = int(now.timestamp()) + CHALLENGE_SECONDS
    payload = f"{app_id}.{expires}.{bits}.{secrets.token_hex(16)}"
    return {
        "algorithm": ALGORITHM,
        "token": f"{payload}.{_sign(secret, payload)}",
        "bits": bits,
        "expires_at": format_timestamp(datetime.fromtimestamp(expires, UTC)),
    }


def zero_bits(digest: bytes) -> int:
    """How many leading bits of ``digest`` are zero."""
    return len(digest) * 8 - int.from_bytes(digest, "big").bit_length()


@dataclass(frozen=True)
class Solved:
    """A challenge proven solved, not yet marked used: its nonce and when it expires."""

    nonce: str
    expires_at: datetime


def check(
    secret: bytes,
    app_id: str,
    bits: int,
    token: str | None,
    solution: str | None,
    now: datetime,
) -> Solved:
    """The challenge ``token`` with ``solution``, checked for app ``app_id`` asking ``bits``
    bits now; ``ChallengeFailed`` (with the reason) otherwise."""
    if not token or not solution:
        raise ChallengeFailed(
            "This app asks for a proof of work: send X-App-Challenge and X-App-Solution.",
            extra={"reason": "missing"},
        )
    payload, _, signature = token.rpartition(".")
    parts = payload.split(".")
    if (
        len(parts) != 4
        or not hmac.compare_digest(signature, _sign(secret, payload))
        or parts[0] != app_id
        or not parts[1].isdigit()
        or not parts[2].isdigit()
    ):
        raise ChallengeFailed("Not a challenge of this app.", extra={"reason": "invalid"})
    expires, asked = int(parts[1]), int(parts[2])
    if asked < bits:
        # The owner made the app harder since this challenge was handed out.
        raise ChallengeFailed(
            "The challenge is easier than the app now asks; fetch a new one.",
            extra={"reason": "invalid"},
        )
    if expires < now.timestamp():
        raise ChallengeFailed(
            "The challenge expired; fetch a new one with the form.", extra={"reason": "expired"}
        )
    digest = hashlib.sha256(f"{token}:{solution}".encode()).digest()
    if zero_bits(digest) < asked:
        raise ChallengeFailed(
            "The solution does not solve the challenge.", extra={"reason": "wrong"}
        )
    return Solved(parts[3], datetime.fromtimestamp(expires, UTC))


def used() -> ChallengeFailed:
    """The error for a challenge whose solution already started a run."""
    return ChallengeFailed(
        "This challenge was used already; fetch a new one with the form.",
        extra={"reason": "used"},
    )
