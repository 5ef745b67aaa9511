"""Access tokens (JWTs, HS256) signed with the server secret."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import jwt

JWT_ALGORITHM = "HS256"


def issue_jwt(secret: bytes, account_id: str, ttl_seconds: int, version: int = 0) -> str:
    """An access token. ``ver`` is the account's token version when it was issued: a
    password change or a disabled account bumps the version and every older token stops."""
    now = datetime.now(UTC)
    claims = {
        "sub": account_id,
        "iat": now,
        "exp": now + timedelta(seconds=ttl_seconds),
        "typ": "access",
        "ver": version,
    }
    return jwt.encode(claims, secret, algorithm=JWT_ALGORITHM)


@dataclass(frozen=True)
class AccessClaims:
    account_id: str
    version: int


def read_jwt(secret: bytes, token: str) -> AccessClaims | None:
    """The claims of a valid, unexpired access token, else None."""
    try:
        claims = jwt.decode(
            token, secret, algorithms=[JWT_ALGORITHM], options={"require": ["exp", "sub"]}
        )
    except jwt.PyJWTError:
        return None
    sub = claims.get("sub")
    version = claims.get("ver", 0)
    if claims.get("typ") != "access" or not isinstance(sub, str) or type(version) is not int:
        return None
    return AccessClaims(sub, version)
