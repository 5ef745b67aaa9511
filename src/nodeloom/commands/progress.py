"""The live view of a run: one row per node (state, progress, credits).

In a terminal it is a Rich ``Live`` table redrawn in place. Anywhere else (a pipe, a CI log)
cursor movements would be garbage, so the same changes are printed as plain lines, one per
change, with progress only at each quarter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nodeloom.client import RunEvent
from nodeloom.schemas.runs import RunOut

STYLES = {
    "pending": "grey50",
    "queued": "grey70",
    "running": "blue",
    "completed": "green",
    "failed": "red",
    "skipped": "grey50",
    "cancelled": "yellow",
}
BAR = 12


@dataclass
class NodeLine:
    node_id: str
    type: str
    status: str = "pending"
    progress: float | None = None
    credits: int = 0
    cached: bool = False
    error: str = ""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class RunProgress:
    """What the view shows, kept up to date from the run's events."""

    def __init__(self, run: RunOut) -> None:
        self.run_id = run.id
        self.status: str = run.status
        self.credits = run.credits_used
        self.estimate = run.estimated_credits
        self.nodes = {n.node_id: NodeLine(n.node_id, n.type) for n in run.node_runs}
        for node in run.node_runs:
            self.nodes[node.node_id].status = node.status
        self.started = time.monotonic()

    def apply(self, event: RunEvent) -> str | None:
        """Take in one event; the line that describes it (None: nothing worth a line)."""
        data = event.data
        if event.type.startswith("run."):
            if event.final:
                self.status = event.type.removeprefix("run.")
                self.credits = int(data.get("credits_used", self.credits))
                error = data.get("error") or {}
                reason = f": {error.get('code')}: {error.get('message')}" if error else ""
                return f"run {self.status} · {_plural(self.credits, 'credit')}{reason}"
            return f"run started · estimate {_plural(self.estimate, 'credit')}"
        node = self.nodes.setdefault(event.node_id or "?", NodeLine(event.node_id or "?", "?"))
        name = f"node {node.node_id} ({node.type})"
        if event.type == "node.progress":
            before = node.progress or 0.0
            node.progress = float(data.get("progress", 0.0))
            if int(node.progress * 4) > int(before * 4):
                return f"{name} {node.progress:.0%}"
            return None
        node.status = event.type.removeprefix("node.")
        if node.status == "started":
            node.status = "running"
            return f"{name} started"
        if node.status == "completed":
            node.progress = 1.0
            node.credits = int(data.get("credits_used", 0))
            node.cached = bool(data.get("cached"))
            self.credits = sum(n.credits for n in self.nodes.values())
            cached = ", cached" if node.cached else ""
            return f"{name} completed · {_plural(node.credits, 'credit')}{cached}"
        if node.status == "failed":
            error = data.get("error") or {}
            node.error = f"{error.get('code', 'error')}: {error.get('message', '')}"
            return f"{name} failed · {node.error}"
        return f"{name} {node.status}"

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def table(self) -> Table:
        title = (
            f"run {self.run_id} · {self.status} · {self.elapsed():.1f} s · "
            f"{self.credits}/{self.estimate} credits"
        )
        table = Table("node", "type", "state", "progress", "credits", title=title)
        for line in self.nodes.values():
            done = line.progress if line.progress is not None else 0.0
            bar = "█" * round(done * BAR) + "░" * (BAR - round(done * BAR))
            state = line.status + (" (cached)" if line.cached else "")
            table.add_row(
                line.node_id,
                line.type,
                Text(state, style=STYLES.get(line.status, "")),
                f"{bar} {done:4.0%}" if line.status != "pending" else "",
                str(line.credits) if line.status == "completed" else "",
            )
        return table


class ProgressView:
    """``with ProgressView(run, console) as view: run.wait(on_event=view.on_event)``."""

    def __init__(self, run: RunOut, console: Console) -> None:
        self.state = RunProgress(run)
        self.console = console
        self.live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.console.is_terminal:
            self.live = Live(self.state.table(), console=self.console, refresh_per_second=8)
            self.live.start()
        else:
            self._line(f"run {self.state.run_id} · {_plural(len(self.state.nodes), 'node')}")
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
