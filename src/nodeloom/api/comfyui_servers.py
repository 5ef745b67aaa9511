"""Every ComfyUI server Nodeloom talks to, as the operator page and an account's credential
show it, and draining one with the Drain button.

The servers are the shared pool's (settings) and those the accounts' comfyui credentials
name (``servers``); their figures are what every process using them reports (this process's
own, live, and the others' through Redis: comfyui_reports.py). A drain is a row in
``comfyui_drains``: every routing process reads that table again within
``comfyui_check_seconds`` (comfyui_drains.py), this one at once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import httpx
from pydantic import ValidationError

from nodeloom.api.state import AppContext
from nodeloom.errors import Conflict, NotFound
from nodeloom.nodes.adapters import comfyui_fleet
from nodeloom.nodes.adapters.comfyui_reports import Report, fleet_servers
from nodeloom.schemas.operator import FleetServerOut
from nodeloom.settings import ComfyUIServer
from nodeloom.store import Record, comfyui_drains

DrainAction = Literal["drain", "undrain"]  # the last segment of the Drain button's URL


async def reports(ctx: AppContext) -> list[Report]:
    """This process's figures and the other processes' (Redis)."""
    others = await ctx.fleet_reports.others() if ctx.fleet_reports is not None else {}
    return [comfyui_fleet.snapshot(), *others.values()]


def timestamped(row: dict[str, Any]) -> dict[str, Any]:
    """``last_seen`` (Unix time) as a datetime."""
    seen = row["last_seen"]
    return {**row, "last_seen": None if seen is None else datetime.fromtimestamp(seen, UTC)}


def credential_fleet(credential_id: str) -> str:
    return f"credential:{credential_id}"


def listed(fields: Any) -> list[ComfyUIServer]:
    """The servers a comfyui credential's fields name (none: one ``base_url``, or the pool)."""
    servers = fields.get("servers") if isinstance(fields, dict) else None
    try:
        return [ComfyUIServer.model_validate(s) for s in servers or []]
    except ValidationError:  # stored before a rule tightened: shown as none, not a 500
        return []


class Servers:
    """The servers one request may see, read once: ``rows`` for the answer; ``where`` says
    which fleet (and credential) each belongs to, for a drain."""

    def __init__(self) -> None:
        self.rows: list[FleetServerOut] = []
        self.where: dict[str, tuple[str, str, str | None]] = {}  # id: fleet, URL, credential

    def add(
        self,
        fleet: str,
        specs: list[ComfyUIServer],
        figures: list[Report],
        drained: set[tuple[str, str]],
        *,
        credential: Record | None = None,
        show_url: bool,
    ) -> None:
        for row in fleet_servers(fleet, specs, figures, drained):
            url = row["base_url"]
            self.where[row["id"]] = (fleet, url, credential.id if credential else None)
            self.rows.append(
                FleetServerOut.model_validate(
                    {
                        **timestamped(row),
                        "fleet": "account" if credential else "pool",
                        "host": httpx.URL(url).netloc.decode(),
                        "base_url": url if show_url else None,
                        "account_email": credential.email if credential else None,
                    }
                )
            )

    def one(self, server_id: str) -> FleetServerOut:
        for row in self.rows:
            if row.id == server_id:
                return row
        raise NotFound("No such ComfyUI server.")


async def every_server(ctx: AppContext) -> Servers:
    """The pool's servers and every account's (the operator page): an account's server by
    its host and the account's e-mail, not its URL."""
    figures = await reports(ctx)
    credentials, drained = await ctx.db.read(
        lambda c: (comfyui_drains.comfyui_credentials(c), comfyui_drains.drained(c))
    )
    servers = Servers()
    servers.add(comfyui_fleet.POOL, ctx.settings.comfyui_pool, figures, drained, show_url=True)
    for credential in credentials:
        fleet = credential_fleet(credential.id)
        specs = listed(credential.fields)
        servers.add(fleet, specs, figures, drained, credential=credential, show_url=False)
    return servers


async def own_servers(ctx: AppContext, account_id: str, credential_id: str) -> Servers:
    """The servers one of the account's comfyui credentials names (its page); another
    account's credential, or one that is not a comfyui credential, is 404."""
    figures = await reports(ctx)
    credentials, drained = await ctx.db.read(
        lambda c: (
            comfyui_drains.comfyui_credentials(c, account_id),
            comfyui_drains.drained(c),
        )
    )
    servers = Servers()
    for credential in credentials:
        if credential.id == credential_id:
            specs = listed(credential.fields)
            fleet = credential_fleet(credential.id)
            servers.add(fleet, specs, figures, drained, credential=credential, show_url=True)
            return servers
    raise NotFound("No such credential.")


async def set_draining(
    ctx: AppContext, servers: Servers, server_id: str, draining: bool, by: str
) -> FleetServerOut:
    """Drain (or undrain) one of ``servers``; the server as it is now. Undraining a server
    whose configuration drains it is a conflict: only that configuration undrains it."""
    row = servers.one(server_id)
    fleet, url, credential = servers.where[server_id]
    if not draining and row.drain_configured:
        where = "NODELOOM_COMFYUI_POOL" if fleet == comfyui_fleet.POOL else "its credential"
        raise Conflict(f"This server is set to drain in {where}; change it there to undrain.")

    def write(conn: Any) -> None:
        if draining:
            comfyui_drains.drain(
                conn,
                server_id=server_id,
                fleet=fleet,
                base_url=url,
                credential_id=credential,
                drained_by=by,
            )
        else:
            comfyui_drains.undrain(conn, server_id)

    await ctx.db.write(write)
    if ctx.drain_feed is not None:
        await ctx.drain_feed.poll()  # this process's fleets at once; the others within a check
    return row.model_copy(update={"draining": draining or row.drain_configured})
