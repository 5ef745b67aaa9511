"""What one node execution may spend: wall time, CPU time and memory.

A budget comes from three layers, each narrowing the one before:

1. the default of the node's category (``DEFAULTS``: a template needs little, a video encode
   a lot), overridden per category or per node type by ``NODELOOM_NODE_BUDGETS``;
2. the cap of the account's plan (``NODELOOM_PLAN_BUDGETS``), so a free account cannot book
   the machine for ten minutes;
3. ``NODELOOM_NODE_TIMEOUT_SECONDS``, the hard ceiling on wall time for every node.

The sandbox enforces the result with OS limits in the node's process (address space and CPU
seconds) and a wall-clock timer in the server that kills the process; see ``pool.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

MB = 1024 * 1024


class BudgetLimits(BaseModel):
    """A partial budget as written in settings: any field left out is not changed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_seconds: float | None = Field(default=None, gt=0)
    cpu_seconds: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, ge=64)


@dataclass(frozen=True)
class Budget:
    wall_seconds: float
    cpu_seconds: float
    memory_mb: int

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb * MB

    def override(self, limits: BudgetLimits | None) -> Budget:
        if limits is None:
            return self
        return Budget(
            limits.wall_seconds if limits.wall_seconds is not None else self.wall_seconds,
            limits.cpu_seconds if limits.cpu_seconds is not None else self.cpu_seconds,
            limits.memory_mb if limits.memory_mb is not None else self.memory_mb,
        )

    def cap(self, limits: BudgetLimits | None) -> Budget:
        if limits is None:
            return self
        return Budget(
            min(self.wall_seconds, limits.wall_seconds or self.wall_seconds),
            min(self.cpu_seconds, limits.cpu_seconds or self.cpu_seconds),
            min(self.memory_mb, limits.memory_mb or self.memory_mb),
        )

    def as_dict(self) -> dict[str, float | int]:
        return {
            "wall_seconds": self.wall_seconds,
            "cpu_seconds": self.cpu_seconds,
            "memory_mb": self.memory_mb,
        }


# Per category. CPU may exceed wall for video: the H.264 encoder runs on several threads.
DEFAULTS: dict[str, Budget] = {
    "text": Budget(wall_seconds=30, cpu_seconds=20, memory_mb=256),
    "utility": Budget(wall_seconds=120, cpu_seconds=30, memory_mb=512),
    "ai": Budget(wall_seconds=600, cpu_seconds=60, memory_mb=768),
    "image": Budget(wall_seconds=120, cpu_seconds=120, memory_mb=1024),
    "audio": Budget(wall_seconds=300, cpu_seconds=300, memory_mb=1024),
    "video": Budget(wall_seconds=600, cpu_seconds=1200, memory_mb=2048),
}
FALLBACK = Budget(wall_seconds=120, cpu_seconds=120, memory_mb=1024)

# Per plan: the most any one node of an account on that plan may spend.
PLAN_CAPS: dict[str, BudgetLimits] = {
    "free": BudgetLimits(wall_seconds=120, cpu_seconds=120, memory_mb=1024),
    "pro": BudgetLimits(wall_seconds=600, cpu_seconds=1200, memory_mb=2048),
}


def resolve(
    node_type: str,
    category: str,
    plan: str,
    *,
    overrides: dict[str, BudgetLimits],
    plan_caps: dict[str, BudgetLimits],
    timeout_seconds: float,
) -> Budget:
    """The budget of one execution of ``node_type`` for an account on ``plan``."""
    budget = DEFAULTS.get(category, FALLBACK)
    budget = budget.override(overrides.get(category)).override(overrides.get(node_type))
    caps = {**PLAN_CAPS, **plan_caps}
    budget = budget.cap(caps.get(plan))
    return budget.cap(BudgetLimits(wall_seconds=timeout_seconds))
