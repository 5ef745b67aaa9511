"""Webhook triggers, scoped to their account and workflow (functions of a Core connection,
run by ``db.read`` / ``db.write``).

Deleted webhooks are kept (soft delete) because runs refer to them. Every query here hides
deleted webhooks, and the trigger look-up also hides webhooks of deleted workflows and of
disabled accounts, so deleting a workflow or disabling its owner stops its webhooks in the
same commit without touching them.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, Webhook, Workflow, utcnow
from nodeloom.db.prepared import Prepared
from nodeloom.store import Record, rows
from nodeloom.store.paging import newest_first

WEBHOOKS = cast(sa.Table, Webhook.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)
_VISIBLE = WEBHOOKS.c.deleted_at.is_(None)


def create(
    conn: Connection,
    *,
    account_id: str,
    workflow_id: str,
    name: str,
    active: bool,
    token_hash: str,
    token_encrypted: str,
    secret_encrypted: str | None,
    callback_url: str | None = None,
) -> Record:
    return rows.insert(
        conn,
        WEBHOOKS,
        id=str(uuid.uuid4()),
        account_id=account_id,
        workflow_id=workflow_id,
        name=name,
        active=active,
        token_hash=token_hash,
        token_encrypted=token_encrypted,
        secret_encrypted=secret_encrypted,
        callback_url=callback_url,
        created_at=utcnow(),
        deleted_at=None,
    )


def page(
    conn: Connection, account_id: str, workflow_id: str, limit: int, cursor: str | None
) -> list[Record]:
    """Newest first, ``limit + 1`` rows so the caller can tell whether a next page exists."""
    query = sa.select(WEBHOOKS).where(
        WEBHOOKS.c.account_id == account_id, WEBHOOKS.c.workflow_id == workflow_id, _VISIBLE
    )
    return list(conn.execute(newest_first(query, WEBHOOKS, limit, cursor)).all())


def _one(account_id: str, workflow_id: str, webhook_id: str) -> Any:
    return sa.and_(
        WEBHOOKS.c.id == webhook_id,
        WEBHOOKS.c.account_id == account_id,
        WEBHOOKS.c.workflow_id == workflow_id,
        _VISIBLE,
    )


def get(conn: Connection, account_id: str, workflow_id: str, webhook_id: str) -> Record | None:
    query = sa.select(WEBHOOKS).where(_one(account_id, workflow_id, webhook_id))
    return conn.execute(query).first()


def update(
    conn: Connection,
    account_id: str,
    workflow_id: str,
    webhook_id: str,
    *,
    name: str | None = None,
    active: bool | None = None,
    change_secret: bool = False,
    secret_encrypted: str | None = None,
    change_callback: bool = False,
    callback_url: str | None = None,
) -> Record | None:
    """Change what is given; the secret only with ``change_secret`` (None then removes it).
    The webhook as changed, or None when it is not there."""
    values: dict[str, Any] = {}
    if name is not None:
        values["name"] = name
    if active is not None:
        values["active"] = active
    if change_secret:
        values["secret_encrypted"] = secret_encrypted
    if change_callback:
        values["callback_url"] = callback_url
    if not values:
        return get(conn, account_id, workflow_id, webhook_id)
    return rows.update(conn, WEBHOOKS, _one(account_id, workflow_id, webhook_id), **values)


def soft_delete(conn: Connection, account_id: str, workflow_id: str, webhook_id: str) -> bool:
    result = conn.execute(
        sa.update(WEBHOOKS)
        .where(_one(account_id, workflow_id, webhook_id))
        .values(deleted_at=utcnow())
    )
    return bool(result.rowcount)


@dataclass(frozen=True)
class TriggerTarget:
    webhook_id: str
    account_id: str
    workflow_id: str
    active: bool
    plan: str
    secret_encrypted: str | None
    workflow_version: datetime  # the workflow's updated_at
    callback_url: str | None


_FOR_TRIGGER = Prepared(
    sa.select(
        WEBHOOKS.c.id,
        WEBHOOKS.c.account_id,
        WEBHOOKS.c.workflow_id,
        WEBHOOKS.c.active,
        _ACCOUNTS.c.plan,
        WEBHOOKS.c.secret_encrypted,
        _WORKFLOWS.c.updated_at,
        WEBHOOKS.c.callback_url,
    )
    .join(_WORKFLOWS, _WORKFLOWS.c.id == WEBHOOKS.c.workflow_id)
    .join(_ACCOUNTS, _ACCOUNTS.c.id == WEBHOOKS.c.account_id)
    .where(
        WEBHOOKS.c.token_hash == sa.bindparam("hash"),
        _VISIBLE,
        _WORKFLOWS.c.deleted_at.is_(None),
        _ACCOUNTS.c.disabled_at.is_(None),
    )
)


def for_trigger(conn: Connection, token_hash: str) -> TriggerTarget | None:
    """One indexed look-up: the webhook by its token's keyed hash, with its owner's current
    plan and its workflow's version. Deleted webhooks and webhooks of deleted workflows or
    disabled accounts are not found.

    The equality test happens on the keyed hash, which an attacker cannot choose, so an
    index look-up leaks nothing useful about stored tokens through timing."""
    row = _FOR_TRIGGER.run(conn, {"hash": token_hash}).first()
    if row is None:
        return None
    return TriggerTarget(row[0], row[1], row[2], bool(row[3]), row[4], row[5], row[6], row[7])


class TriggerTargets:
    """The trigger targets this process read last, by token hash (active ones only, the
    least recently used forgotten past ``size``), so a trigger needs no look-up of its own.

    A remembered target is never trusted alone: the run of a trigger is inserted only while
    its webhook is still as it was read (``transitions.WebhookAsRead``: active, not deleted,
    the same secret and callback, its workflow not deleted and of the same version, the
    owner's plan the same and the account enabled), checked by the acceptance transaction's
    INSERT itself. A change made through any replica (deleting or switching off the
    webhook, a new secret, a plan change, disabling the account) therefore stops the very
    next trigger everywhere; the trigger then reads the webhook again and is answered as
    the webhook now is (api/routes/webhooks.py)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._items: OrderedDict[str, TriggerTarget] = OrderedDict()

    def get(self, token_hash: str) -> TriggerTarget | None:
        target = self._items.get(token_hash)
        if target is not None:
            self._items.move_to_end(token_hash)
        return target

    def remember(self, token_hash: str, target: TriggerTarget | None) -> None:
        """Keep ``target`` as the latest read of ``token_hash`` (an inactive or missing one
        is forgotten: it is refused anyway, and read again each time)."""
        if target is None or not target.active:
            self._items.pop(token_hash, None)
            return
        self._items[token_hash] = target
        self._items.move_to_end(token_hash)
        if len(self._items) > self._size:
            self._items.popitem(last=False)
