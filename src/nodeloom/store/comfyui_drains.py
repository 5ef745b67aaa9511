"""ComfyUI servers drained with the Drain button (``comfyui_drains``): plain functions of a
Core connection. A row is keyed by the server's id (``comfyui_fleet.server_id``: its fleet
and URL), so draining twice is one row and undraining what is not drained changes nothing."""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, ComfyUIDrain, Credential, utcnow
from nodeloom.store import Record

DRAINS = cast(sa.Table, ComfyUIDrain.__table__)
_CREDENTIALS = cast(sa.Table, Credential.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)
# Read by every routing process every comfyui_check_seconds: the table holds a few rows.
_ALL = sa.select(DRAINS.c.fleet, DRAINS.c.base_url)


def drain(
    conn: Connection,
    *,
    server_id: str,
    fleet: str,
    base_url: str,
    credential_id: str | None,
    drained_by: str,
) -> None:
    """Mark the server drained (already drained: left as it was)."""
    if conn.execute(sa.select(DRAINS.c.server_id).where(DRAINS.c.server_id == server_id)).first():
        return
    conn.execute(
        sa.insert(DRAINS).values(
            server_id=server_id,
            fleet=fleet,
            base_url=base_url,
            credential_id=credential_id,
            drained_by=drained_by,
            created_at=utcnow(),
        )
    )


def undrain(conn: Connection, server_id: str) -> None:
    conn.execute(sa.delete(DRAINS).where(DRAINS.c.server_id == server_id))


def drained(conn: Connection) -> set[tuple[str, str]]:
    """Every drained server, as (fleet, base_url)."""
    return {(row.fleet, row.base_url) for row in conn.execute(_ALL)}


def comfyui_credentials(conn: Connection, account_id: str | None = None) -> list[Record]:
    """The ``comfyui`` credentials (of every account, or of ``account_id``) with their
    account's e-mail: ``id``, ``account_id``, ``email``, ``name``, ``fields``."""
    query = (
        sa.select(
            _CREDENTIALS.c.id,
            _CREDENTIALS.c.account_id,
            _ACCOUNTS.c.email,
            _CREDENTIALS.c.name,
            _CREDENTIALS.c.fields,
        )
        .join(_ACCOUNTS, _ACCOUNTS.c.id == _CREDENTIALS.c.account_id)
        .where(_CREDENTIALS.c.kind == "comfyui")
        .order_by(_ACCOUNTS.c.email, _CREDENTIALS.c.created_at, _CREDENTIALS.c.id)
    )
    if account_id is not None:
        query = query.where(_CREDENTIALS.c.account_id == account_id)
    return list(conn.execute(query).all())
