"""Process metrics in the Prometheus text format (GET /metrics).

Counters live in this process; in scale-out each replica and worker exposes its own and the
scraper sums them. Deliberately tiny: a dict of counters and a few gauges read on scrape.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable


class Metrics:
    def __init__(self) -> None:
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
        self._help: dict[str, str] = {}
        self._gauges: dict[str, tuple[str, Callable[[], float]]] = {}

    def inc(self, name: str, amount: float = 1.0, help_: str = "", **labels: str) -> None:
        self._counters[(name, tuple(sorted(labels.items())))] += amount
        if help_ and name not in self._help:
            self._help[name] = help_

    def gauge(self, name: str, help_: str, read: Callable[[], float]) -> None:
        self._gauges[name] = (help_, read)

    def value(self, name: str, **labels: str) -> float:
        return self._counters.get((name, tuple(sorted(labels.items()))), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        seen: set[str] = set()
        for (name, labels), value in sorted(self._counters.items()):
            if name not in seen:
                seen.add(name)
                if name in self._help:
                    lines.append(f"# HELP {name} {self._help[name]}")
                lines.append(f"# TYPE {name} counter")
            label_text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.append(f"{name}{{{label_text}}} {value:g}" if labels else f"{name} {value:g}")
        for name, (help_, read) in sorted(self._gauges.items()):
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name} {read():g}")
        return "\n".join(lines) + "\n"
