"""What the server's operators see (``/api/v1/operator``): the shared ComfyUI pool and every
server of the accounts' comfyui credentials; and what an account sees of its own fleet's
servers (``/api/v1/credentials/{id}/servers``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from nodeloom.timestamps import Timestamp


class ServerFigures(BaseModel):
    """One ComfyUI server: its configuration and what the processes using it report."""

    id: str = Field(description="The server's id in the drain endpoints.")
    name: str = Field(description="What /metrics and node runs call it.")
    max_in_flight: int = Field(description="Prompts it is given at once (per process).")
    draining: bool = Field(
        description="Its prompts finish; it gets no new one (configured, or the Drain button)."
    )
    drain_configured: bool = Field(
        description="Draining because its configuration says so (only a change of that "
        "configuration undrains it)."
    )
    answering: bool | None = Field(
        description="Whether it answered the last check of a process using it; null "
        "while no process has used its fleet since it started."
    )
    in_flight: int = Field(description="Prompts the server processes have on it now (summed).")
    queue: int = Field(description="Prompts in its own /queue at the last check.")
    failures: int = Field(description="Checks and prompts it did not answer (summed).")
    last_seen: Timestamp | None = Field(description="Its last answer to any process.")
    processes: int = Field(description="How many processes reported it (API replicas, workers).")


class PoolServerOut(ServerFigures):
    base_url: str


class ComfyUIPoolOut(BaseModel):
    account_limit: int = Field(description="Prompts one account may have in flight on the pool.")
    servers: list[PoolServerOut]


class FleetServerOut(ServerFigures):
    """A server as the operator page lists it: of the pool, or of an account's credential.
    An account's server shows its host only (its URL may carry a path the account keeps to
    itself) and the account's e-mail; never the credential or its secrets."""

    base_url: str | None = Field(
        description="The pool's servers, and an account's own: their URL as configured."
    )
    fleet: Literal["pool", "account"]
    host: str = Field(description="Host and port of its URL.")
    account_email: str | None = Field(description="The account whose credential names it.")


class ComfyUIServersOut(BaseModel):
    account_limit: int = Field(description="Prompts one account may have in flight on the pool.")
    servers: list[FleetServerOut]
