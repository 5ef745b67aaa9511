"""Revocation reaches open streams at once: a WebSocket or an event stream authenticated by a
credential is closed the moment that credential stops being valid.

Requests re-authenticate every time, so for them revocation is immediate by construction. A
stream authenticates once, at its start; it registers here under its scopes instead:

- ``key:<api key id>``   — the key was revoked;
- ``jwt:<account id>:<version>`` — the account's access tokens of that version were revoked
  (its password changed; tokens issued afterwards carry a newer version);
- ``account:<account id>`` — the account was disabled (every credential).

Whoever revokes writes a row to ``credential_revocations`` in the same transaction
(``record``) and, when it is a server, tells its own registry right away. Every server process
follows the table (``RevocationFeed``, one indexed read a second), so a revocation made by
another replica, another process on the same SQLite file, or the command line closes the
streams it holds within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom import background
from nodeloom.auth.principal import CredentialKind, Principal
from nodeloom.db.engine import Database
from nodeloom.db.models import CredentialRevocation, utcnow

log = logging.getLogger("nodeloom.auth")

POLL_SECONDS = 1.0
KEEP = timedelta(days=1)
_TABLE = cast(sa.Table, CredentialRevocation.__table__)
_INSERT = sa.insert(_TABLE)
_AFTER = sa.select(_TABLE.c.id, _TABLE.c.scope).where(_TABLE.c.id > sa.bindparam("after"))
_LAST = sa.select(sa.func.max(_TABLE.c.id))
_PRUNE = sa.delete(_TABLE).where(
    _TABLE.c.created_at < sa.bindparam("before", type_=_TABLE.c.created_at.type)
)


def key_scope(key_id: str) -> str:
    return f"key:{key_id}"


def jwt_scope(account_id: str, version: int) -> str:
    """The access tokens of an account issued with ``version`` (newer ones are not hit)."""
    return f"jwt:{account_id}:{version}"


def account_scope(account_id: str) -> str:
    return f"account:{account_id}"


def scopes_of(principal: Principal) -> list[str]:
    scopes = [account_scope(principal.account_id)]
    if principal.via is CredentialKind.API_KEY and principal.api_key_id:
        scopes.append(key_scope(principal.api_key_id))
    else:
        scopes.append(jwt_scope(principal.account_id, principal.token_version))
    return scopes


def record(conn: Connection, scope: str) -> None:
    """Write the revocation in the caller's transaction (sync Core connection)."""
    conn.execute(_INSERT, {"scope": scope, "created_at": utcnow()})


def prune(conn: Connection) -> int:
    return int(conn.execute(_PRUNE, {"before": utcnow() - KEEP}).rowcount or 0)


class Revocations:
    """The open streams of this process, by scope."""

    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def watch(self, principal: Principal) -> Iterator[asyncio.Event]:
        """An event that is set when the principal's credential is revoked."""
        revoked = asyncio.Event()
        scopes = scopes_of(principal)
        for scope in scopes:
            self._watchers.setdefault(scope, set()).add(revoked)
        try:
            yield revoked
        finally:
            for scope in scopes:
                watchers = self._watchers.get(scope)
                if watchers is not None:
                    watchers.discard(revoked)
                    if not watchers:
                        del self._watchers[scope]

    def revoke(self, scope: str) -> int:
        watchers = self._watchers.get(scope, set())
        for revoked in watchers:
            revoked.set()
        return len(watchers)

    @property
    def watched(self) -> int:
        return sum(len(w) for w in self._watchers.values())


class RevocationFeed:
    """Follows ``credential_revocations`` and hands every new row to ``Revocations``."""

    def __init__(self, db: Database, revocations: Revocations) -> None:
        self.db = db
        self.revocations = revocations
        self._last = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._last = int(await self.db.read(lambda c: c.execute(_LAST).scalar() or 0))
        self._task = asyncio.create_task(self._follow(), name="revocation-feed")

    async def stop(self) -> None:
        await background.cancel_and_wait(self._task)

    async def poll(self) -> None:
        rows = await self.db.read(lambda c: c.execute(_AFTER, {"after": self._last}).all())
        for row in rows:
            self._last = max(self._last, row.id)
            self.revocations.revoke(row.scope)

    async def _follow(self) -> None:
        await background.every(
            POLL_SECONDS,
            self.poll,
            log,
            "could not read the revocation feed",
            first_wait=POLL_SECONDS,
        )
