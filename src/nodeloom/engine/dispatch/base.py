"""How runs reach an executor. The API calls ``submit`` after the run is committed; a
dispatcher must never be the only record of a run (the database is), so losing a submission
only delays a run until the next sweep or resume."""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.engine import Connection

from nodeloom.engine.graph import Graph
from nodeloom.engine.run_state import RunState


class Dispatcher(Protocol):
    accepting: bool

    @property
    def owner(self) -> str | None:
        """The driver a run accepted here records (this process), or None when queue
        workers drive runs node by node."""

    async def start(self) -> None:
        """Begin work; resume runs left ``running`` by an earlier process."""

    async def submit(self, run_id: str, fresh: RunState | None = None) -> None:
        """Have the run executed (soon, here or elsewhere). ``fresh``, the state of a run
        just accepted here, lets an executor skip reading it back; it is the executor's from
        then on."""

    def enqueue_in(
        self, conn: Connection, run_id: str, node_ids: list[str], graph: Graph | None = None
    ) -> bool:
        """Hand the queued ``node_ids`` of a run over to the executor inside the caller's
        transaction (``conn``), so that they are handed over if and only if it commits:
        True when done (``submit`` is then not needed), False when this dispatcher takes
        runs only by ``submit``, after the commit."""

    async def cancel(self, run_id: str) -> None:
        """The run's cancel flag is committed; make its executor act on it now."""

    async def stop(self) -> None:
        """Stop taking runs; let running nodes finish within the grace period."""
