"""Keyed hashes, API keys, signed URLs and encrypted secrets, derived from the server secret.

JWTs are in auth/access_tokens.py: PyJWT and the algorithms it loads cost every process that
imports this module (the CLI, workers) about 0.1 s, for tokens only the API issues and reads."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken

API_KEY_PREFIX = "nlk_"
_PREFIX_SHOWN = 12  # "nlk_" + 8 characters: enough to tell keys apart, useless to an attacker


def keyed_hash(secret: bytes, value: str, purpose: str) -> str:
    """HMAC-SHA256 of ``value``; ``purpose`` separates key spaces (API keys, webhook tokens)."""
    return hmac.new(secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class NewApiKey:
    key: str
    prefix: str
    key_hash: str


def new_api_key(secret: bytes) -> NewApiKey:
    key = API_KEY_PREFIX + secrets.token_urlsafe(32)
    return NewApiKey(key=key, prefix=key[:_PREFIX_SHOWN], key_hash=api_key_hash(secret, key))


def api_key_hash(secret: bytes, key: str) -> str:
    return keyed_hash(secret, key, "api-key")


def looks_like_api_key(credential: str) -> bool:
    return credential.startswith(API_KEY_PREFIX)


def sign_url(secret: bytes, path: str, ttl_seconds: int, now: float | None = None) -> str:
    """A query string ``exp=..&sig=..`` that authorises a GET of ``path`` until ``exp``."""
    expires = int((now if now is not None else time.time()) + ttl_seconds)
    sig = keyed_hash(secret, f"{path}|{expires}", "signed-url")
    return f"exp={expires}&sig={sig}"


def check_signed_url(secret: bytes, path: str, expires: str, sig: str) -> bool:
    try:
        exp = int(expires)
    except ValueError:
        return False
    expected = keyed_hash(secret, f"{path}|{exp}", "signed-url")
    return hmac.compare_digest(expected, sig) and exp >= time.time()


def _fernet(secret: bytes) -> Fernet:
    key = hashlib.sha256(b"nodeloom-at-rest:" + secret).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(secret: bytes, plaintext: str) -> str:
    """Encrypt a secret for storage at rest (webhook tokens, provider keys)."""
    return _fernet(secret).encrypt(plaintext.encode()).decode()


def decrypt(secret: bytes, ciphertext: str) -> str | None:
    try:
        return _fernet(secret).decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        return None
