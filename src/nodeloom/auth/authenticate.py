"""Turn a bearer credential into a Principal: an API key (one indexed look-up of its keyed
hash, no argon2) or a JWT (signature check plus the account's current plan)."""

from __future__ import annotations

from nodeloom.auth.principal import CredentialKind, Plan, Principal
from nodeloom.auth.tokens import api_key_hash, looks_like_api_key, read_jwt
from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.errors import Unauthorized
from nodeloom.store import accounts, api_keys


async def authenticate(
    db: Database, secret: bytes, usage: KeyUsage, credential: str | None
) -> Principal:
    if not credential:
        raise Unauthorized("Send Authorization: Bearer <API key or access token>.")
    if looks_like_api_key(credential):
        async with db.read() as session:
            owner = await api_keys.owner_by_hash(session, api_key_hash(secret, credential))
        if owner is None or owner.revoked_at is not None:
            raise Unauthorized("The API key is invalid or has been revoked.")
        usage.record(owner.key_id)
        return Principal(owner.account_id, Plan(owner.plan), CredentialKind.API_KEY, owner.key_id)
    account_id = read_jwt(secret, credential)
    if account_id is None:
        raise Unauthorized("The access token is invalid or has expired.")
    async with db.read() as session:
        plan = await accounts.plan_of(session, account_id)
    if plan is None:
        raise Unauthorized("The access token's account no longer exists.")
    return Principal(account_id, Plan(plan), CredentialKind.JWT)
