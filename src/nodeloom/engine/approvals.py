"""Waiting for a person: how an ``Approval`` node (nodes/approval.py) runs, and how a
decision reaches it.

The database is the truth. When the node starts, it writes its approval (one per run and
node), committed, and announces ``node.waiting`` with the approval's id and its signed
links; then it waits on the event loop, like a provider node waiting for its webhook
(engine/hook_signals.py): no execution slot, no sandbox process. A decision — by the API,
a signed link, on any process — is one conditional UPDATE from ``pending`` (so deciding
twice is a conflict, never two outcomes), committed, then signalled on the event bus; the
node wakes, reads its approval again and passes its input on down ``approved`` or
``rejected``. A lost signal costs at most ``hook_signals.RECHECK`` seconds: the process looks at
all the approvals it waits on that often, in one statement (engine/approval_watch.py).

The timeout is the row's ``expires_at``, fixed when the approval is written: a node run
again after a restart (its run adopted, its job run again) finds its approval as it was and
waits only what is left, then decides it with ``timeout_outcome`` through the same
conditional UPDATE — a person deciding at that instant wins or loses cleanly.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy.exc

from nodeloom.auth.tokens import check_signed_url, sign_url
from nodeloom.db.engine import Database
from nodeloom.db.models import utcnow
from nodeloom.engine import approval_watch, hook_signals
from nodeloom.engine.graph import GraphNode
from nodeloom.engine.run_state import ArtifactInfo
from nodeloom.events.bus import EventBus
from nodeloom.events.model import Event
from nodeloom.nodes.approval import APPROVED, REJECTED, ApprovalParams
from nodeloom.sdk._node import NodeFailure, Produced, StoredMedia
from nodeloom.settings import Settings
from nodeloom.store import Record
from nodeloom.store import approvals as approval_store
from nodeloom.timestamps import format_timestamp

log = logging.getLogger("nodeloom.approvals")
T = TypeVar("T")

# What a read or write of an approval may meet under load that says nothing about the
# approval: a pool or statement timeout, a connection dropped. The decision is in the
# database, not in the waiting coroutine, so these are tried again instead of failing a node
# that a person may still decide (measured: 161 of 10,000 waiting nodes failed so with two
# workers, before this).
TRANSIENT = (
    TimeoutError,
    OSError,
    sqlalchemy.exc.TimeoutError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
)
RETRY_SECONDS = (0.5, 2.0, 5.0)  # between tries of one read or write


async def _patiently(what: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()``, tried again after a transient failure (``TRANSIENT``) a few times."""
    for delay in RETRY_SECONDS:
        try:
            return await attempt()
        except TRANSIENT as exc:
            log.warning("%s failed (%s); trying again in %.1f s", what, type(exc).__name__, delay)
            await asyncio.sleep(delay)
    return await attempt()


DECIDED = "approval.decided"  # the bus signal that wakes the node (never in a run's log)
ACTIONS = {"approve": APPROVED, "reject": REJECTED}

Announce = Callable[[dict[str, Any]], Awaitable[None]]


def action_path(approval_id: str, action: str) -> str:
    return f"/api/v1/approvals/{approval_id}/{action}"


def signed_links(settings: Settings, row: Record, base: str | None = None) -> dict[str, str]:
    """The one-click links of an approval (``approve_url``, ``reject_url``), signed as
    artifact URLs are and valid until the approval expires. ``base``: the public address;
    without one, ``NODELOOM_BASE_URL`` (links in events and callbacks), else a path."""
    prefix = (base or settings.base_url or "").rstrip("/")
    ttl = max(1, int((row.expires_at - utcnow()).total_seconds()) + 1)
    links = {}
    for action in ACTIONS:
        path = action_path(row.id, action)
        links[f"{action}_url"] = f"{prefix}{path}?{sign_url(settings.secret, path, ttl)}"
    return links


def link_valid(settings: Settings, approval_id: str, action: str, exp: str, sig: str) -> bool:
    return check_signed_url(settings.secret, action_path(approval_id, action), exp, sig)


def waiting_event(settings: Settings, row: Record) -> dict[str, Any]:
    """The data of the ``node.waiting`` event announcing ``row``."""
    return {
        "approval_id": row.id,
        "prompt": row.prompt,
        "allow_edit": row.allow_edit,
        "expires_at": format_timestamp(row.expires_at),
        **signed_links(settings, row),
    }


async def decided(bus: EventBus, row: Record) -> None:
    """Wake the node waiting on ``row`` (committed decided already)."""
    await hook_signals.wake(
        bus, row.account_id, row.workflow_id, row.run_id, row.node_id, signal_type=DECIDED
    )


@dataclass(frozen=True)
class Waiting:
    """What waiting for a person needs (the executor's, without importing it)."""

    db: Database
    bus: EventBus
    settings: Settings


async def _time_out(env: Waiting, row: Record) -> None:
    """Decide ``row`` with its timeout outcome (unless someone decided it just now)."""
    outcome = APPROVED if row.timeout_outcome == "approve" else REJECTED
    approval_id = row.id
    await _patiently(
        f"the timeout of approval {approval_id}",
        lambda: env.db.write(
            lambda c: approval_store.decide(c, approval_id, outcome, by="timeout", now=utcnow())
        ),
    )


async def wait(
    env: Waiting,
    account_id: str,
    run_id: str,
    node: GraphNode,
    value: ArtifactInfo | list[ArtifactInfo] | None,
    announce: Announce | None,
) -> Produced:
    """Run the Approval node ``node`` of run ``run_id``: write (or find) its approval, wait for its
    decision or its expiry, and pass the input on down the output decided (NodeFailure
    when it has no input)."""
    params: ApprovalParams = node.params  # type: ignore[assignment]
    node_id = node.id
    if value is None or isinstance(value, list):
        raise NodeFailure("the Approval node has no input", "no_input")
    now = utcnow()
    # open_once finds the approval it wrote before: trying it again writes nothing twice.
    row, new = await _patiently(
        f"opening the approval of node {node_id} of run {run_id}",
        lambda: env.db.write(
            lambda c: approval_store.open_once(
                c,
                account_id=account_id,
                run_id=run_id,
                node_id=node_id,
                kind=params.kind,
                prompt=params.prompt,
                allow_edit=params.allow_edit,
                timeout_outcome=params.timeout_outcome,
                input_artifact_id=value.id,
                now=now,
                expires_at=now + dt.timedelta(seconds=params.timeout_seconds),
            )
        ),
    )
    if new and announce is not None:
        await announce(waiting_event(env.settings, row))
    # The node reads its row when woken: by the bus, by the process's watch (which looks at
    # every waiting approval in one statement, for a signal lost), or by its expiry.
    watch = approval_watch.watch_of(env.db, hook_signals.recheck_of(env.bus))
    signal = Event(DECIDED, 0, now, run_id, row.workflow_id, account_id, node_id)
    with (
        hook_signals.waiter(
            env.bus, account_id, run_id, node_id, signal_type=DECIDED, recheck=math.inf
        ) as waiter,
        watch.watching(row.id, waiter.sub, signal),
    ):
        while True:
            row = await _patiently(
                f"reading the approval of node {node_id} of run {run_id}",
                lambda: env.db.read(lambda c: approval_store.of_node(c, run_id, node_id)),
            )
            if row.status != approval_store.PENDING:
                break
            left = (row.expires_at - utcnow()).total_seconds()
            if left <= 0:
                await _time_out(env, row)
                continue
            await waiter.wait(left)
    if row.status == APPROVED and row.text is not None:
        produced = Produced(data=row.text.encode("utf-8"), ports=(APPROVED,))
    elif value.data is not None:
        produced = Produced(data=value.data, ports=(row.status,))
    else:
        # The input's bytes are in the store already: the output is the same blob.
        stored = StoredMedia(
            value.sha256,
            value.size_bytes,
            value.content_type,
            value.width,
            value.height,
            value.duration_ms,
        )
        produced = Produced(
            stored=stored,
            width=value.width,
            height=value.height,
            duration_ms=value.duration_ms,
            ports=(row.status,),
        )
    return produced
