"""The live view of a run: one row per node (state, progress, credits).

In a terminal it is a Rich ``Live`` table redrawn in place. Anywhere else (a pipe, a CI log)
cursor movements would be garbage, so the same changes are printed as plain lines, one per
change, with progress only at each quarter.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nodeloom.client import RunEvent
from nodeloom.client._runs import apply_event, item_progress
from nodeloom.schemas.runs import RunOut

STYLES = {
    "pending": "grey50",
    "queued": "grey70",
    "running": "blue",
    "waiting": "magenta",  # an Approval node waiting for a person
    "completed": "green",
    "failed": "red",
    "skipped": "grey50",
    "cancelled": "yellow",
}
BAR = 12
# The server's default for a Repeat's ``max_iterations`` (docs/repeat.md).
DEFAULT_MAX_ITERATIONS = 3


def repeat_bounds(graph_json: Mapping[str, Any]) -> dict[str, int]:
    """Every node of a Repeat region (the Repeat, the nodes it reaches up to its Until, the
    Until) with the Repeat's ``max_iterations``: their node runs are iterations, not items."""
    nodes = [n for n in graph_json.get("nodes", []) if isinstance(n, dict)]
    types = {n.get("id"): n.get("type") for n in nodes}
    after: dict[str, list[str]] = {}
    for edge in graph_json.get("edges", []):
        if isinstance(edge, dict):
            after.setdefault(str(edge.get("source")), []).append(str(edge.get("target")))
    bounds: dict[str, int] = {}
    for node in nodes:
        if node.get("type") != "Repeat":
            continue
        raw = (node.get("data") or {}).get("max_iterations")
        most = raw if isinstance(raw, int) and raw >= 1 else DEFAULT_MAX_ITERATIONS
        seen = {node["id"]}
        stack = list(after.get(node["id"], []))
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if types.get(current) != "Until":
                stack.extend(after.get(current, []))
        for member in seen:
            bounds.setdefault(member, most)
    return bounds


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class RunProgress:
    """What the view shows: the run's state, kept up to date from its events by the client's
    ``apply_event`` (the one place events become state), plus each node's progress."""

    def __init__(self, run: RunOut, repeats: Mapping[str, int] | None = None) -> None:
        # A copy of the record only (``run`` may be the client's live run object).
        self.run = RunOut.model_validate(run.model_dump())
        # Nodes of a Repeat region, with the Repeat's max_iterations (``repeat_bounds``).
        self.repeats = dict(repeats or {})
        self.nodes = {n.node_id: n for n in self.run.node_runs}
        self.progress: dict[str, float] = {}
        self.started = time.monotonic()

    @property
    def status(self) -> str:
        return self.run.status

    def apply(self, event: RunEvent) -> str | None:
        """Take in one event; the line that describes it (None: nothing worth a line)."""
        apply_event(self.run, event)
        run = self.run
        if event.final:
            error = run.error
            reason = f": {error.code}: {error.message}" if error else ""
            return f"run {run.status} · {_plural(run.credits_used, 'credit')}{reason}"
        if event.type == "run.started":
            return f"run started · estimate {_plural(run.estimated_credits, 'credit')}"
        if "item_index" in event.data:
            return self._item_line(event)
        node = self.nodes.get(event.node_id or "")
        if node is None:
            return None
        name = f"node {node.node_id} ({node.type})"
        if event.type == "node.progress":
            before = self.progress.get(node.node_id, 0.0)
            now = self.progress[node.node_id] = float(event.data.get("progress", 0.0))
            return f"{name} {now:.0%}" if int(now * 4) > int(before * 4) else None
        if node.status == "running":
            return f"{name} started"
        if node.status == "completed":
            self.progress[node.node_id] = 1.0
            cached = ", cached" if node.cached else ""
            return f"{name} completed · {_plural(node.credits_used, 'credit')}{cached}"
        if node.status == "failed":
            return f"{name} failed · {_node_error(node.error)}"
        return f"{name} {node.status}"

    def _item_line(self, event: RunEvent) -> str | None:
        """An item's node run (docs/batches.md): a line when it ends, with the node's count
        of items done, e.g. ``node tts item 16 completed · 17/40``."""
        if event.type not in ("node.completed", "node.failed"):
            return None
        item = event.data["item_index"]
        what = (
            "completed"
            if event.type == "node.completed"
            else ("failed · " + _node_error(event.data.get("error")))
        )
        most = self.repeats.get(event.node_id or "")
        if most is not None or self._repeat_node(event.node_id):
            return f"node {event.node_id} {_iteration(int(item) + 1, most)} {what}"
        done, _ = item_progress(self.run).get(event.node_id or "", (0, 0))
        total = int(event.data.get("item_count") or 0)
        return f"node {event.node_id} item {item} {what} · {done}/{total}"

    def _repeat_node(self, node_id: str | None) -> bool:
        """Without the graph: a Repeat's own iterations are entries of type RepeatIteration."""
        return any(n.node_id == node_id and n.type == "RepeatIteration" for n in self.run.node_runs)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def table(self) -> Table:
        run = self.run
        title = (
            f"run {run.id} · {run.status} · {self.elapsed():.1f} s · "
            f"{run.credits_used}/{run.estimated_credits} credits"
        )
        table = Table("node", "type", "state", "progress", "credits", title=title)
        items = item_progress(run)
        shown: set[str] = set()
        for node in run.node_runs:
            if node.item_index is not None:
                # One row per node run once per item: how many items are done.
                if node.node_id not in shown:
                    shown.add(node.node_id)
                    finished, total = items[node.node_id]
                    entries = [n for n in run.node_runs if n.node_id == node.node_id]
                    credits = sum(n.credits_used for n in entries)
                    failed = sum(n.status == "failed" for n in entries if n.item_index is not None)
                    state = (
                        _iteration(total, self.repeats[node.node_id])
                        if node.node_id in self.repeats
                        else f"{finished}/{total} items"
                    ) + (f", {failed} failed" if failed else "")
                    table.add_row(
                        node.node_id, node.type, Text(state), "", str(credits) if credits else ""
                    )
                continue
            done = self.progress.get(node.node_id, 1.0 if node.status == "completed" else 0.0)
            bar = "█" * round(done * BAR) + "░" * (BAR - round(done * BAR))
            state = node.status + (" (cached)" if node.cached else "")
            table.add_row(
                node.node_id,
                node.type,
                Text(state, style=STYLES.get(node.status, "")),
                f"{bar} {done:4.0%}" if node.status != "pending" else "",
                str(node.credits_used) if node.status == "completed" else "",
            )
        return table


def _iteration(k: int, most: int | None) -> str:
    """``iteration 2/5`` (the Repeat's max_iterations known), else ``iteration 2``."""
    return f"iteration {k}" if most is None else f"iteration {k}/{max(most, k)}"


def _node_error(error: dict[str, object] | None) -> str:
    error = error or {}
    return f"{error.get('code', 'error')}: {error.get('message', '')}"


class ProgressView:
    """``with ProgressView(run, console) as view: run.wait(on_event=view.on_event)``;
    ``repeats``: the nodes of the run's Repeat regions (``repeat_bounds`` of its graph)."""

    def __init__(
        self, run: RunOut, console: Console, repeats: Mapping[str, int] | None = None
    ) -> None:
        self.state = RunProgress(run, repeats)
        self.console = console
        self.live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.console.is_terminal:
            self.live = Live(self.state.table(), console=self.console, refresh_per_second=8)
            self.live.start()
        else:
            self._line(f"run {self.state.run.id} · {_plural(len(self.state.nodes), 'node')}")
        return self

    def on_event(self, event: RunEvent) -> None:
        line = self.state.apply(event)
        if self.live is not None:
            self.live.update(self.state.table())
        elif line is not None:
            self._line(line)

    def _line(self, text: str) -> None:
        # Plain text, no markup or colour: the console is not a terminal.
        self.console.print(f"[{self.state.elapsed():6.1f}s] {text}", markup=False, soft_wrap=True)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.live is not None:
            self.live.update(self.state.table())
            self.live.stop()
