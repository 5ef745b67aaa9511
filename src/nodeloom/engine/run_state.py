"""What a run is at one moment, and the rules that move it on — pure, no I/O.

Both executors use it: the in-process driver (runner.py) keeps one ``RunState`` in memory
for as long as it owns the run, and the queue workers (steps.py) load one from the database
for each step, under the run's row lock; either way it is built from the rows by
``stepper.load`` (or, for a run being accepted, by ``new_run.new_run``). A change is only
*recorded* here, into a ``transitions.Batch``; it exists once the batch commits.

Statuses move only along the transitions ``states.NODE_FROM`` and ``states.RUN_FROM``
allow, here as in the database: a move they do not allow raises ``StaleTransition`` before
anything is written.

The rules:
- a node is runnable when every node feeding it completed — or, in a graph with branches,
  when every edge into it is live (engine/branches.py); one dead edge skips it;
- a failed node skips its pending descendants; other branches go on. A failed node whose
  ``error`` output has an edge sends its error down it instead, and the run goes on;
- the run ends when every node ended: failed if any failed, else completed; a run
  cancelled on request ends cancelled; what was held but not charged is released.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn, cast

from nodeloom.engine import branches
from nodeloom.engine.batches import expand
from nodeloom.engine.graph import Graph
from nodeloom.engine.transitions import AddedNode, Batch, NewArtifact
from nodeloom.ids import uuid7
from nodeloom.states import (
    FINISHED_NODE_STATES,
    NODE_FROM,
    RUN_FROM,
    NodeStatus,
    RunStatus,
    StaleTransition,
)

ArtifactInfo = NewArtifact  # an artifact as the engine needs it (no local path: see executor)


def artifact_info(row: Any) -> ArtifactInfo:
    """A row of ``artifacts`` as the engine needs it."""
    return ArtifactInfo(
        row.id,
        row.content_type,
        row.size_bytes,
        row.sha256,
        row.width,
        row.height,
        row.duration_ms,
        row.data,
    )


UNFINISHED_NODE_STATES = tuple(s for s in NodeStatus if s not in FINISHED_NODE_STATES)


@dataclass
class Outcome:
    """How one node execution ended."""

    node_id: str
    status: NodeStatus  # COMPLETED or FAILED
    at: datetime
    artifact: ArtifactInfo | None = None
    new_artifact: bool = False  # written by this execution (else a cache hit)
    credits: int = 0
    cached: bool = False
    cache_key: str | None = None
    error: dict[str, Any] | None = None
    items: int | None = None  # a ForEach's item count (engine/batches.py)
    # The outputs a node with branches took (``Produced.ports``); None: all of them.
    ports: tuple[str, ...] | None = None


def failed(node_id: str, code: str, message: str, at: datetime) -> Outcome:
    return Outcome(node_id, NodeStatus.FAILED, at, error={"code": code, "message": message})


def crashed(node_id: str, attempts: int, at: datetime) -> Outcome:
    message = (
        f"the node was interrupted {attempts} times (the process running it stopped); it is "
        "not started again"
    )
    return failed(node_id, "node_crashed", message, at)


class StatusMap(dict[str, NodeStatus]):
    """Node id -> status, which also knows the nodes in each status: asking which nodes run,
    wait or are unfinished costs the size of the answer, not a scan of the graph (the driver
    asks after every node of a chain, so scans made a chain of n nodes cost n * n). Every
    assignment keeps the index right, whoever makes it (the driver, queue workers loading a
    run), so nobody has to remember to. A node's first status is whatever its row says;
    every later one must be allowed to follow it (``NODE_FROM``)."""

    def __init__(self, statuses: Mapping[str, NodeStatus] | None = None) -> None:
        super().__init__()
        self.members: dict[NodeStatus, set[str]] = {status: set() for status in NodeStatus}
        for node_id, status in (statuses or {}).items():
            self[node_id] = status

    def __setitem__(self, node_id: str, status: NodeStatus) -> None:
        old = self.get(node_id)
        if old is not None:
            if old not in NODE_FROM.get(status, ()):
                raise StaleTransition(f"node {node_id} cannot go from {old} to {status}")
            self.members[old].discard(node_id)
        super().__setitem__(node_id, status)
        self.members[status].add(node_id)

    def count(self, statuses: Iterable[NodeStatus]) -> int:
        return sum(len(self.members[status]) for status in statuses)

    def _unindexed(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError("node statuses change one by one (status[node_id] = status)")

    # dict's own versions of these would change statuses behind the index's back.
    __delitem__ = pop = popitem = clear = update = setdefault = __ior__ = _unindexed


@dataclass
class RunState:
    run_id: str
    account_id: str
    workflow_id: str
    graph: Graph
    run_input: dict[str, Any] | None
    use_cache: bool
    estimate: int
    created_at: datetime
    plan: str
    status: dict[str, NodeStatus]
    artifacts: dict[str, ArtifactInfo] = field(default_factory=dict)
    credits: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    claims: dict[str, str | None] = field(default_factory=dict)
    # The outputs completed nodes with branches took (engine/branches.py); absent: all.
    ports: dict[str, tuple[str, ...]] = field(default_factory=dict)
    first_error: dict[str, Any] | None = None
    cancel_requested: bool = False
    # The seq of the last event in the run's log: as loaded, then as committed through
    # this state (stepper.write / stepper.committed). 0: no event yet.
    seq: int = 0
    # RUNNING until ``finish`` ends the run (once).
    run_status: RunStatus = RunStatus.RUNNING
    # Nodes that may be runnable: those found runnable last time and the successors of nodes
    # completed since. None: look at every node (the first time). Keeps a chain of n nodes
    # from costing n scans of n nodes.
    _candidates: set[str] | None = field(default=None, repr=False)
    # Item instances runnable but held back by their ForEach's concurrency or the account's
    # cap on items in flight.
    _held: set[str] = field(default_factory=set, repr=False)
    # How many item instances this run may have queued or running at once, given what the
    # account's other runs have in flight (``batch_items_in_flight_per_account``); set by
    # the executor before each ``runnable``. None: no account bound.
    items_allowed: int | None = None
    # The account's cap itself, for the queue steps that count it in the database.
    items_cap: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, StatusMap):
            self.status = StatusMap(self.status)

    @property
    def _statuses(self) -> StatusMap:
        assert isinstance(self.status, StatusMap)
        return self.status

    def batch(self) -> Batch:
        return Batch(
            self.run_id, self.workflow_id, self.account_id, items=self.graph.batches.instances
        )

    def with_status(self, *statuses: NodeStatus) -> list[str]:
        """The nodes in any of ``statuses``, in graph order."""
        members = self._statuses.members
        found = [node_id for status in set(statuses) for node_id in members[status]]
        return sorted(found, key=self.graph.rank.__getitem__)

    def count(self, *statuses: NodeStatus) -> int:
        """How many nodes are in any of ``statuses``."""
        return self._statuses.count(set(statuses))

    # -- what can run -----------------------------------------------------------------------

    def runnable(self) -> list[str]:
        """Pending nodes whose inputs all completed, in graph order."""
        if self._candidates is None:
            pool: list[str] = self.graph.order
        else:
            pool = sorted(self._candidates, key=self.graph.rank.__getitem__)
        found = [
            node_id
            for node_id in pool
            if self.status[node_id] == NodeStatus.PENDING and self._inputs_done(node_id)
        ]
        if self.graph.batches:
            found = self._within_concurrency(found)
        self._candidates = set(found) | self._held
        return found

    def _inputs_done(self, node_id: str) -> bool:
        sources = self.graph.inputs[node_id].values()
        if node_id in self.graph.batches.collected_by:
            # A collector gathers what its items came to, completed or not.
            return all(self.status[s] in FINISHED_NODE_STATES for srcs in sources for s in srcs)
        if self.graph.branching:
            return self._decide(node_id) == "run"
        return all(self.status[s] == NodeStatus.COMPLETED for srcs in sources for s in srcs)

    # -- branches (engine/branches.py) -----------------------------------------------------

    def _edge_state(self, source: str, port: str) -> branches.EdgeState:
        status = self.status.get(source)
        error_sent = status == NodeStatus.FAILED and source in self.artifacts
        return branches.edge_state(status, port, self.ports.get(source), error_sent)

    def _decide(self, node_id: str) -> str:
        states = [self._edge_state(s, port) for _, s, port in self.graph.sources(node_id)]
        return branches.decide(states, self.graph.nodes[node_id].node.flow_role == "merge")

    def _settle(self, batch: Batch, node_id: str, at: datetime) -> None:
        """``node_id`` ended taking some outputs: the pending nodes now known never to run
        (every edge into a Merge dead, or one into any other node) are skipped, and so on
        downstream; those that may run now are looked at by the next ``runnable``."""
        stack = list(self.graph.downstream[node_id])
        skipped: list[str] = []
        while stack:
            target = stack.pop()
            if self.status.get(target) != NodeStatus.PENDING:
                continue
            if self._candidates is not None:
                self._candidates.add(target)
            if target in self.graph.batches.collected_by and not self._ends_unreached(target):
                continue
            if target in self.graph.batches.collected_by or self._decide(target) == "skip":
                self.status[target] = NodeStatus.SKIPPED
                self._held.discard(target)
                skipped.append(target)
                stack.extend(self.graph.downstream[target])
        if skipped:
            skipped.sort(key=self.graph.rank.__getitem__)
            reason = {
                "code": "branch_not_taken",
                "message": f"not on the way {node_id} took: no input of it ran",
            }
            batch.skip_nodes(skipped, at, because=node_id, reason=reason)

    def _ends_unreached(self, node_id: str) -> bool:
        """Is ``node_id`` a Repeat's Until whose last iteration never reached its Until (a
        branch inside the region not taken)? Then it is skipped, as what follows it."""
        if not self.graph.batches.ends_repeat(node_id):
            return False
        sources = [s for srcs in self.graph.inputs[node_id].values() for s in srcs]
        return any(self.status.get(s) == NodeStatus.SKIPPED for s in sources)

    def _send_error(self, batch: Batch, node_id: str, error: dict[str, Any], at: datetime) -> None:
        """A node whose ``error`` output has an edge failed: its error, as JSON, becomes its
        artifact and goes down that edge; the run goes on."""
        body = json.dumps(
            {**self.error_of(node_id, error)}, ensure_ascii=False, separators=(",", ":")
        ).encode("utf-8", "replace")
        artifact = ArtifactInfo(
            id=uuid7(),
            content_type="text/plain",
            size_bytes=len(body),
            sha256=hashlib.sha256(body).hexdigest(),
            width=None,
            height=None,
            duration_ms=None,
            data=body,
        )
        self.artifacts[node_id] = artifact
        batch.fail_node(node_id, at, error, error_artifact=artifact)
        self._held.discard(node_id)
        self._settle(batch, node_id, at)

    # -- batches (engine/batches.py) -------------------------------------------------------

    def _within_concurrency(self, found: list[str]) -> list[str]:
        """``found`` less the item instances over their ForEach's ``concurrency`` (queued or
        running at once) or over ``items_allowed`` (the account's cap on items in flight, all
        its runs together: engine/items.py); those are held, earliest item first, until some
        end. Held nodes stay runnable candidates, so they are looked at again on every
        pass."""
        batches = self.graph.batches
        busy: dict[str, int] = {}
        for node_id in self.with_status(NodeStatus.QUEUED, NodeStatus.RUNNING):
            region = batches.region_of_instance(node_id)
            if region is not None:
                busy[region.for_each] = busy.get(region.for_each, 0) + 1
        # The account's bound: this run's items in flight, all regions together.
        in_flight = sum(busy.values())
        allowed = self.items_allowed
        kept: list[str] = []
        self._held = set()
        for node_id in found:
            region = batches.region_of_instance(node_id)
            if region is None:
                kept.append(node_id)
            elif busy.get(region.for_each, 0) < region.concurrency and (
                allowed is None or in_flight < allowed
            ):
                busy[region.for_each] = busy.get(region.for_each, 0) + 1
                in_flight += 1
                kept.append(node_id)
            else:
                self._held.add(node_id)
        return kept

    @property
    def held(self) -> bool:
        """Are item instances runnable but held back (concurrency or the account's cap)?"""
        return bool(self._held)

    def items_in_flight(self) -> int:
        """This run's item instances queued or running (what the account's cap counts)."""
        batches = self.graph.batches
        if not batches.instances:
            return 0
        return sum(
            1
            for node_id in self.with_status(NodeStatus.QUEUED, NodeStatus.RUNNING)
            if batches.region_of_instance(node_id) is not None
        )

    def _expand(self, batch: Batch, for_each: str, count: int) -> None:
        """A ForEach completed with ``count`` items: the run's graph gains their nodes, and
        the run its rows (pending; added in this same step, with the ForEach's end)."""
        counts = {**self.graph.batches.counts, for_each: count}
        self.graph = expand(self.graph, counts)
        batch.items = self.graph.batches.instances
        added = [
            AddedNode(node_id, self.graph.nodes[node_id].type, self.graph.nodes[node_id].index, k)
            for node_id, (_, k, _) in self.graph.batches.instances.items()
            if node_id not in self.status
        ]
        batch.add_nodes(added)
        for node in added:
            self.status[node.node_id] = NodeStatus.PENDING
        self._candidates = None

    def error_of(self, node_id: str, error: dict[str, Any]) -> dict[str, Any]:
        """The run's error when node ``node_id`` failed with ``error``: an item's node is
        named as drawn, with its item index."""
        item = self.graph.batches.instances.get(node_id)
        if item is None:
            return {**error, "node_id": node_id}
        return {**error, "node_id": item[0], "item_index": item[1]}

    def item_failure(self, node_id: str) -> bool:
        """Does a failure of ``node_id`` fail only its item (not the run)?"""
        region = self.graph.batches.region_of_instance(node_id)
        return region is not None and not region.fail_fast

    def _item_failed(self, batch: Batch, node_id: str, at: datetime) -> bool:
        """An item's node failed: True when that fails only the item (its own later nodes
        skipped, the collectors go on). With ``fail_fast`` False is answered — the failure
        is the run's — and the items not started yet are skipped."""
        region = self.graph.batches.region_of_instance(node_id)
        if region is None:
            return False
        if region.fail_fast:
            waiting = [
                n
                for n in self.with_status(NodeStatus.PENDING, NodeStatus.QUEUED)
                if self.graph.batches.region_of_instance(n) is region
            ]
            for skipped_id in waiting:
                self.status[skipped_id] = NodeStatus.SKIPPED
            self._held -= set(waiting)
            batch.skip_nodes(waiting, at, because=node_id)
            return False
        collectors = set(region.collectors)
        found: list[str] = []
        stack = list(self.graph.downstream[node_id])
        while stack:
            current = stack.pop()
            if current in collectors or current in found:
                continue
            if self.status[current] == NodeStatus.PENDING:
                found.append(current)
            stack.extend(self.graph.downstream[current])
        found.sort(key=self.graph.rank.__getitem__)
        for skipped_id in found:
            self.status[skipped_id] = NodeStatus.SKIPPED
        self._held -= set(found)
        batch.skip_nodes(found, at, because=node_id)
        return True

    def inputs_of(self, node_id: str) -> dict[str, ArtifactInfo | list[ArtifactInfo] | None]:
        """The node's input artifacts by input name (a list for a multiple input)."""
        node = self.graph.nodes[node_id]
        values: dict[str, ArtifactInfo | list[ArtifactInfo] | None] = {}
        for spec_input in node.node.spec.inputs:
            sources = self.graph.inputs[node_id].get(spec_input.name, [])
            if node_id in self.graph.batches.collected_by:
                # A collector's list keeps every item's place: None for an item that did
                # not complete (nodes/batch.py reads it so).
                values[spec_input.name] = cast(
                    list[ArtifactInfo], [self.artifacts.get(s) for s in sources]
                )
                continue
            if node.node.flow_role == "merge":
                # A Merge gets what came down its live edges only, in edge order.
                ports = self.graph.ports.get(node_id, {}).get(spec_input.name, [])
                found = [
                    self.artifacts[s]
                    for s, port in zip(sources, ports or ["output"] * len(sources), strict=True)
                    if self._edge_state(s, port) == "live"
                ]
            else:
                found = [self.artifacts[s] for s in sources]
            values[spec_input.name] = (
                found if spec_input.multiple else (found[0] if found else None)
            )
        return values

    # -- recording changes ------------------------------------------------------------------

    def queue(self, batch: Batch, node_ids: list[str], at: datetime) -> None:
        if node_ids:
            batch.queue_nodes(node_ids, at)
            for node_id in node_ids:
                self.status[node_id] = NodeStatus.QUEUED
                self.claims[node_id] = None

    def start(self, batch: Batch, node_id: str, at: datetime, claimed_by: str) -> None:
        batch.start_node(node_id, at, claimed_by)
        self.status[node_id] = NodeStatus.RUNNING
        self.claims[node_id] = claimed_by
        self.attempts[node_id] = self.attempts.get(node_id, 0) + 1

    def record(self, batch: Batch, outcome: Outcome) -> None:
        """A node ended: completed (charged, its artifact kept) or failed (its pending
        descendants skipped)."""
        node_id = outcome.node_id
        self.status[node_id] = outcome.status
        if outcome.status == NodeStatus.COMPLETED:
            assert outcome.artifact is not None
            if self._candidates is not None:
                self._candidates.update(self.graph.downstream[node_id])
            self.artifacts[node_id] = outcome.artifact
            self.credits[node_id] = outcome.credits
            if outcome.ports is not None:
                self.ports[node_id] = outcome.ports
            batch.complete_node(
                node_id,
                outcome.at,
                artifact_id=outcome.artifact.id,
                new_artifact=outcome.artifact if outcome.new_artifact else None,
                credits=outcome.credits,
                cached=outcome.cached,
                cache_key=outcome.cache_key,
                ports=outcome.ports,
            )
            batches_ = self.graph.batches
            if node_id in batches_.regions and batches_.regions[node_id].repeat:
                self._expand(batch, node_id, 1)  # a Repeat: its first iteration
            elif node_id in batches_.regions:
                assert outcome.items is not None, "a ForEach says how many items it has"
                # Its node.completed event (just recorded) says how many items follow.
                batch.events[-1][2]["items"] = outcome.items
                self._expand(batch, node_id, outcome.items)
            elif batches_:
                # An iteration's Until whose condition did not hold: the next iteration.
                repeat, iterations = batches_.next_iteration(node_id, outcome.ports)
                if repeat:
                    self._expand(batch, repeat, iterations)
            if self.graph.branching:
                self._settle(batch, node_id, outcome.at)
            return
        error = outcome.error or {"code": "node_failed", "message": "the node failed"}
        if node_id in self.graph.error_routed:
            self._send_error(batch, node_id, error, outcome.at)
            return
        batch.fail_node(node_id, outcome.at, error)
        self._held.discard(node_id)
        if self.graph.batches and self._item_failed(batch, node_id, outcome.at):
            return
        if self.first_error is None:
            self.first_error = self.error_of(node_id, error)
        skipped = self.pending_descendants(node_id)
        for skipped_id in skipped:
            self.status[skipped_id] = NodeStatus.SKIPPED
        batch.skip_nodes(skipped, outcome.at, because=node_id)

    def pending_descendants(self, node_id: str) -> list[str]:
        found: list[str] = []
        stack = list(self.graph.downstream[node_id])
        seen: set[str] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if self.status[current] == NodeStatus.PENDING:
                found.append(current)
            stack.extend(self.graph.downstream[current])
        return sorted(found, key=self.graph.rank.__getitem__)

    def cancel(self, batch: Batch, at: datetime, node_ids: list[str] | None = None) -> list[str]:
        """Cancel ``node_ids`` (default: every unfinished node); the ids cancelled."""
        targets = node_ids if node_ids is not None else self.unfinished()
        if targets:
            batch.cancel_nodes(targets, at)
            for node_id in targets:
                self.status[node_id] = NodeStatus.CANCELLED
        return targets

    def unfinished(self) -> list[str]:
        return self.with_status(*UNFINISHED_NODE_STATES)

    @property
    def all_finished(self) -> bool:
        return self._statuses.count(FINISHED_NODE_STATES) == len(self.status)

    def finish(
        self,
        batch: Batch,
        at: datetime,
        error: dict[str, Any] | None = None,
        status: RunStatus | None = None,
    ) -> None:
        """End the run: ``status`` when given, else failed if a node failed (or ``error``
        says why), else completed; what was held and not charged is released."""
        error = error or self.first_error
        if status is None:
            status = RunStatus.FAILED if error is not None else RunStatus.COMPLETED
        if self.run_status not in RUN_FROM[status]:
            raise StaleTransition(f"run {self.run_id} already ended {self.run_status}")
        self.run_status = status
        used = sum(self.credits.values())
        batch.finish_run(
            status,
            at,
            error,
            credits_used=used,
            release=max(0, self.estimate - used),
            duration_ms=int((at - self.created_at).total_seconds() * 1000),
        )

    def finish_cancelled(self, batch: Batch, at: datetime) -> None:
        self.cancel(batch, at)
        error = {"code": "cancelled", "message": "the run was cancelled", "node_id": None}
        self.finish(batch, at, error, RunStatus.CANCELLED)
