"""Everything a request handler may need, built once by create_app and kept on app.state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nodeloom.artifacts.store import ArtifactStore
from nodeloom.auth.revocation import Revocations
from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.engine.dispatch.base import Dispatcher
from nodeloom.engine.graph_cache import GraphCache
from nodeloom.engine.scratch import ScratchSpace
from nodeloom.engine.submit import Acceptor
from nodeloom.events.bus import EventBus
from nodeloom.metrics import Metrics
from nodeloom.nodes.adapters.comfyui_drains import DrainFeed
from nodeloom.nodes.adapters.comfyui_reports import FleetReports
from nodeloom.nodes.registry import Registry
from nodeloom.ratelimit import RateLimiter
from nodeloom.sandbox.pool import SandboxPool
from nodeloom.schemas.nodes import NodeTypeOut
from nodeloom.settings import Settings
from nodeloom.store.webhooks import TriggerTargets
from nodeloom.uploads.tus_parts import Parts


@dataclass
class AppContext:
    settings: Settings
    db: Database
    registry: Registry
    limiter: RateLimiter
    key_usage: KeyUsage
    store: ArtifactStore
    bus: EventBus
    dispatcher: Dispatcher
    graphs: GraphCache
    acceptor: Acceptor
    metrics: Metrics
    sandbox: SandboxPool
    revocations: Revocations
    scratch: ScratchSpace  # where uploads are received and decoded
    # Other processes' ComfyUI fleets, for /metrics and the operator page (Redis).
    fleet_reports: FleetReports | None = None
    # The drained servers, read again at once after a Drain click (comfyui_drains.py).
    drain_feed: DrainFeed | None = None
    # Webhooks as this process last read them, for triggers (store/webhooks.py).
    trigger_targets: TriggerTargets = field(default_factory=TriggerTargets)
    readiness_checks: dict[str, Callable[[], Awaitable[bool]]] = field(default_factory=dict)
    draining: bool = False  # set on SIGTERM: new requests get 503 (api/serving.py)
    node_types: list[NodeTypeOut] | None = None
    tus_parts: Parts | None = None  # made on first use (api/routes/tus.py)
