"""Provider credentials, scoped to their account (functions of a Core connection, run by
``db.read`` / ``db.write``).

Rows hold the secret fields only encrypted (``secret_encrypted``); decrypting is the
caller's business, done just before the secret is handed to the job that needs it. Deleting
a credential removes its row: workflows that name it then report it missing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.engine import Database
from nodeloom.db.models import Credential, utcnow
from nodeloom.db.prepared import Prepared
from nodeloom.errors import FieldError
from nodeloom.store import Record, rows
from nodeloom.store.paging import newest_first

CREDENTIALS = cast(sa.Table, Credential.__table__)
GRAPH_ROOT = "/graph_json"
# Asked on every execute of a workflow that names credentials: prepared (db/prepared.py).
_KINDS = Prepared(
    sa.select(CREDENTIALS.c.id, CREDENTIALS.c.kind).where(
        CREDENTIALS.c.account_id == sa.bindparam("account"),
        CREDENTIALS.c.id.in_(sa.bindparam("ids", expanding=True)),
    )
)
# The same for one id, the usual graph's case: an IN list is rendered per call on
# PostgreSQL (SQLAlchemy's whole execute path, ~0.2 ms of an API replica's CPU per execute
# of a provider workflow), an equality is prepared once (issue #36).
_KIND = Prepared(
    sa.select(CREDENTIALS.c.id, CREDENTIALS.c.kind).where(
        CREDENTIALS.c.account_id == sa.bindparam("account"),
        CREDENTIALS.c.id == sa.bindparam("id"),
    )
)
# Read and marked used by every node run that names a credential (issue #36: a provider
# node starts with them).
_GET = Prepared(
    sa.select(CREDENTIALS).where(
        CREDENTIALS.c.id == sa.bindparam("id"),
        CREDENTIALS.c.account_id == sa.bindparam("account"),
    )
)
_MARK_USED = Prepared(
    sa.update(CREDENTIALS)
    .where(CREDENTIALS.c.id == sa.bindparam("id"))
    .values(last_used_at=sa.bindparam("at"))
)


def create(
    conn: Connection,
    *,
    account_id: str,
    name: str,
    kind: str,
    fields: dict[str, Any],
    secret_encrypted: str,
    hint: str,
) -> Record:
    now = utcnow()
    return rows.insert(
        conn,
        CREDENTIALS,
        id=str(uuid.uuid4()),
        account_id=account_id,
        name=name,
        kind=kind,
        fields=fields,
        secret_encrypted=secret_encrypted,
        hint=hint,
        created_at=now,
        updated_at=now,
        last_used_at=None,
    )


def page(conn: Connection, account_id: str, limit: int, cursor: str | None) -> list[Record]:
    """Newest first, ``limit + 1`` rows so the caller can tell whether a next page exists."""
    query = sa.select(CREDENTIALS).where(CREDENTIALS.c.account_id == account_id)
    return list(conn.execute(newest_first(query, CREDENTIALS, limit, cursor)).all())


def _one(account_id: str, credential_id: str) -> Any:
    return sa.and_(CREDENTIALS.c.id == credential_id, CREDENTIALS.c.account_id == account_id)


def get(conn: Connection, account_id: str, credential_id: str) -> Record | None:
    return _GET.run(conn, {"account": account_id, "id": credential_id}).first()


def kinds(conn: Connection, account_id: str, ids: Iterable[str]) -> dict[str, str]:
    """Kind by id, of those of ``ids`` that the account has."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    if len(wanted) == 1:
        rows = _KIND.run(conn, {"account": account_id, "id": wanted[0]})
    else:
        rows = _KINDS.run(conn, {"account": account_id, "ids": wanted})
    return {row.id: row.kind for row in rows}


async def read_kinds(db: Database, account_id: str, ids: Iterable[str]) -> dict[str, str]:
    """``kinds`` as a read of its own: for one id, ``Database.fetch`` (a connection
    straight from the pool, about 0.1 ms of CPU less than a read's; issue #36)."""
    wanted = sorted(set(ids))
    if len(wanted) != 1:
        return await db.read(lambda c: kinds(c, account_id, wanted))
    rows = await db.fetch(_KIND, {"account": account_id, "id": wanted[0]})
    return {row.id: row.kind for row in rows}


def update(
    conn: Connection,
    account_id: str,
    credential_id: str,
    *,
    name: str | None = None,
    fields: dict[str, Any] | None = None,
    secret_encrypted: str | None = None,
    hint: str | None = None,
) -> Record | None:
    """Change what is given (``fields`` with the secret and hint that go with them). The
    credential as changed, or None when the account has no such credential."""
    values: dict[str, Any] = {"updated_at": utcnow()}
    if name is not None:
        values["name"] = name
    if fields is not None:
        values.update(fields=fields, secret_encrypted=secret_encrypted, hint=hint)
    return rows.update(conn, CREDENTIALS, _one(account_id, credential_id), **values)


def delete(conn: Connection, account_id: str, credential_id: str) -> bool:
    result = conn.execute(sa.delete(CREDENTIALS).where(_one(account_id, credential_id)))
    return bool(result.rowcount)


def mark_used(conn: Connection, credential_id: str) -> None:
    _MARK_USED.run(conn, {"id": credential_id, "at": utcnow()})


# ----------------------------------------------------------------------------- in workflows

# (JSON pointer of the param, credential id, the kinds the node takes) for each node of a
# graph that names one.
Refs = list[tuple[str, str, tuple[str, ...]]]


def refs_in_json(graph_json: Any, kinds_of: Callable[[str], tuple[str, ...]]) -> Refs:
    """The credentials a workflow's graph JSON names, on nodes whose type has the param
    (``kinds_of`` the type: the kinds it takes, none when it has no such param)."""
    nodes = graph_json.get("nodes") if isinstance(graph_json, dict) else None
    if not isinstance(nodes, list):
        return []
    found: Refs = []
    for index, raw in enumerate(nodes):
        data = raw.get("data") if isinstance(raw, dict) else None
        if not isinstance(data, dict) or not isinstance(raw.get("type"), str):
            continue
        value = data.get("credential")
        wanted = kinds_of(raw["type"]) if isinstance(value, str) and value else ()
        if isinstance(value, str) and wanted:
            found.append((f"{GRAPH_ROOT}/nodes/{index}/data/credential", value, wanted))
    return found


def refs_in_graph(nodes: Iterable[Any]) -> Refs:
    """The same for a checked graph's nodes (``GraphNode``: index and params)."""
    return [
        (
            f"{GRAPH_ROOT}/nodes/{node.index}/data/credential",
            node.params.credential,
            node.node.spec.credential_kinds,
        )
        for node in nodes
        if getattr(node.params, "credential", None)
    ]


def problems(conn: Connection, account_id: str, refs: Refs) -> list[FieldError]:
    """What is wrong with the credentials ``refs`` name: not in this account (another
    account's is reported the same way: it is not there for this one), or of a kind the
    node does not take."""
    if not refs:
        return []
    return problems_of(refs, kinds(conn, account_id, (cid for _, cid, _ in refs)))


def problems_of(refs: Refs, found: dict[str, str]) -> list[FieldError]:
    """``problems`` given the kinds of the account's credentials ``found`` among them."""
    errors: list[FieldError] = []
    for pointer, credential_id, wanted in refs:
        have = found.get(credential_id)
        if have is None:
            errors.append(FieldError(pointer, f"no credential {credential_id} in this account"))
        elif have not in wanted:
            errors.append(
                FieldError(
                    pointer,
                    f"credential {credential_id} is a {have} credential; this node takes "
                    f"{'an' if wanted[0][0] in 'aeiou' else 'a'} {' or '.join(wanted)} one",
                )
            )
    return errors
