"""How runs reach an executor. The API calls ``submit`` after the run is committed; a
dispatcher must never be the only record of a run (the database is), so losing a submission
only delays a run until the next sweep or resume."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.engine import Connection

from nodeloom.db.prepared import Params, Prepared
from nodeloom.engine.graph import Graph
from nodeloom.engine.run_state import RunState


@dataclass(frozen=True, slots=True)
class Handover:
    """The queued ``node_ids`` of a run that a dispatcher is asked to take over. ``account_id``,
    the run's, is given when its row is not written yet; ``kinds``, the kinds of the
    credentials the run's nodes name, when the caller has just read them (the acceptance
    checks them): they are then not read again. ``alone``: for a part of an acceptance sent
    as one statement (``transitions.created_alone``), with no transaction to read in."""

    run_id: str
    node_ids: list[str]
    graph: Graph | None = None
    account_id: str | None = None
    kinds: Mapping[str, str] | None = None
    alone: bool = False


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

    def handover(
        self, conn: Connection | None, nodes: Handover
    ) -> tuple[Prepared, Params | None] | None:
        """The statement (and its parameters; None: nothing to send) that hands ``nodes``
        over to the executor when the caller's transaction (``conn``) sends it, so that they
        are handed over if and only if it commits (``submit`` is then not needed); None when
        this dispatcher takes runs only by ``submit``, after the commit, or when ``alone``
        and the statement cannot be a part of one."""

    async def cancel(self, run_id: str) -> None:
        """The run's cancel flag is committed; make its executor act on it now."""

    async def stop(self) -> None:
        """Stop taking runs; let running nodes finish within the grace period."""
