"""Turn a bearer credential into a Principal: an API key (one indexed look-up of its keyed
hash, no argon2) or a JWT (signature check plus the account's current plan).

This runs on every request, so the look-ups are prebuilt Core statements on a plain
connection: no ORM session, no statement construction per request.
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa

from nodeloom.auth.access_tokens import read_jwt
from nodeloom.auth.principal import CredentialKind, Plan, Principal
from nodeloom.auth.tokens import api_key_hash, looks_like_api_key
from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.db.models import Account, ApiKey
from nodeloom.db.prepared import Prepared
from nodeloom.errors import Unauthorized

_KEYS = cast(sa.Table, ApiKey.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)
_KEY_OWNER = Prepared(
    sa.select(
        _KEYS.c.id,
        _KEYS.c.account_id,
        _ACCOUNTS.c.plan,
        _KEYS.c.revoked_at,
        _ACCOUNTS.c.disabled_at,
    )
    .join(_ACCOUNTS, _ACCOUNTS.c.id == _KEYS.c.account_id)
    .where(_KEYS.c.key_hash == sa.bindparam("hash"))
)
_ACCOUNT = Prepared(
    sa.select(_ACCOUNTS.c.plan, _ACCOUNTS.c.token_version, _ACCOUNTS.c.disabled_at).where(
        _ACCOUNTS.c.id == sa.bindparam("id")
    )
)


async def authenticate(
    db: Database, secret: bytes, usage: KeyUsage, credential: str | None
) -> Principal:
    if not credential:
        raise Unauthorized("Send Authorization: Bearer <API key or access token>.")
    if looks_like_api_key(credential):
        params = {"hash": api_key_hash(secret, credential)}
        row = (await db.fetch(_KEY_OWNER, params)).first()
        if row is None or row.revoked_at is not None:
            raise Unauthorized("The API key is invalid or has been revoked.")
        if row.disabled_at is not None:
            raise Unauthorized("The API key's account is disabled.")
        usage.record(row.id)
        return Principal(row.account_id, Plan(row.plan), CredentialKind.API_KEY, row.id)
    claims = read_jwt(secret, credential)
    if claims is None:
        raise Unauthorized("The access token is invalid or has expired.")
    account = (await db.fetch(_ACCOUNT, {"id": claims.account_id})).first()
    if account is None:
        raise Unauthorized("The access token's account no longer exists.")
    if account.disabled_at is not None:
        raise Unauthorized("The access token's account is disabled.")
    if account.token_version != claims.version:
        raise Unauthorized("The access token was revoked (the password changed); log in again.")
    return Principal(
        claims.account_id, Plan(account.plan), CredentialKind.JWT, token_version=claims.version
    )
