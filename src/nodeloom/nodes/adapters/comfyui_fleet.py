"""A fleet of ComfyUI servers: which one runs a prompt, and when.

A ``comfyui`` credential names one server (``base_url``: the prompt goes there, as it always
did), several (``servers``), or the operator's shared pool (``shared_pool``, the servers of
``NODELOOM_COMFYUI_POOL``). For a fleet, each prompt:

- goes only to a server that has every ``class_type`` it uses and every model file it names
  (a loader's combo input whose value is a model file: ``ckpt_name``, ``unet_name``...), as
  the server's ``GET /object_info`` lists them. That answer is kept, fetched again in the
  background every ``comfyui_object_info_seconds`` and at once when no server seems to fit. A
  prompt that no server can run fails at once, naming what each server lacks;
- then to the one with the shortest queue — our prompts in flight there, or the length of its
  own ``/queue`` (other processes' prompts) when that is longer — among those with a free
  slot (``max_in_flight``, 1 by default). Waiting for a slot is a future on the event loop:
  the node holds no worker or sandbox slot while it waits (provider nodes never do);
- free slots go first to the account with the fewest prompts in flight on the fleet, then the
  one served least, then the oldest request; on the shared pool an account has at most
  ``comfyui_pool_account_limit`` in flight.

Health: a task per fleet asks each server ``GET /queue`` every ``comfyui_check_seconds``; a
server that does not answer is taken out (no new prompt) and checked again with back-off up to
``CHECK_MAX``; one that answers again is put back. A prompt whose server stopped answering is
submitted again on another (the node records it: ``resubmitted`` in the node run's provider
job). A draining server keeps its prompts to the end and gets no new one: ``draining`` in its
configuration, or drained with the Drain button (the ``comfyui_drains`` table, which each
process reads again every ``comfyui_check_seconds``: comfyui_drains.py calls ``set_drained``).

This state is the process's (in-flight counts, the servers' answers): in scale-out each worker
keeps its own, and each sees the others' prompts through the servers' ``/queue``. What the
node depends on after a crash — the prompt and the server it went to — is on the node run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import time
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from nodeloom.nodes.adapters import policy
from nodeloom.nodes.adapters.comfyui_listener import Listener
from nodeloom.nodes.adapters.comfyui_protocol import ComfyUIClient, auth_headers
from nodeloom.sdk._node import NodeFailure
from nodeloom.settings import ComfyUIServer, Settings

MODEL_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth", ".bin", ".gguf", ".sft", ".onnx")
CHECK_TIMEOUT = 5.0  # seconds a health check or an /object_info fetch may take
CHECK_MAX = 60.0  # longest back-off between checks of a server that does not answer
MISS_REFRESH = 2.0  # seconds: /object_info older than this is fetched again on a miss
IDLE_STOP = 60.0  # seconds without a prompt after which a fleet's health task ends
POOL = "pool"


@dataclass(frozen=True)
class Needs:
    """What a prompt needs of a server: node classes and (class, input, model file)."""

    classes: frozenset[str]
    models: tuple[tuple[str, str, str], ...]


def needs_of(prompt: Mapping[str, Any]) -> Needs:
    classes: set[str] = set()
    models: set[tuple[str, str, str]] = set()
    for node in prompt.values():
        if not isinstance(node, dict) or not isinstance(node.get("class_type"), str):
            continue
        kind = node["class_type"]
        classes.add(kind)
        for name, value in (node.get("inputs") or {}).items():
            if isinstance(value, str) and value.lower().endswith(MODEL_SUFFIXES):
                models.add((kind, name, value))
    return Needs(frozenset(classes), tuple(sorted(models)))


def combo_options(spec: Any) -> list[str] | None:
    """The choices of an ``/object_info`` input spec that is a combo (``[[a, b], {...}]``,
    or the newer ``["COMBO", {"options": [a, b]}]``); None for any other input."""
    if not isinstance(spec, list) or not spec:
        return None
    if isinstance(spec[0], list):
        return [str(o) for o in spec[0]]
    if spec[0] == "COMBO" and len(spec) > 1 and isinstance(spec[1], dict):
        options = spec[1].get("options")
        return [str(o) for o in options] if isinstance(options, list) else None
    return None


def lacking(needs: Needs, info: Mapping[str, Any]) -> list[str]:
    """What ``needs`` asks that a server's ``/object_info`` (``info``) does not have."""
    said: list[str] = []
    absent = sorted(c for c in needs.classes if c not in info)
    if absent:
        said.append("node types " + ", ".join(absent))
    files: list[str] = []
    for kind, name, file in needs.models:
        node = info.get(kind)
        if not isinstance(node, dict):
            continue
        declared = node.get("input")
        inputs: dict[str, Any] = declared if isinstance(declared, dict) else {}
        spec = None
        for group in ("required", "optional"):
            found = inputs.get(group)
            if isinstance(found, dict) and name in found:
                spec = found[name]
        options = combo_options(spec)
        if options is not None and file not in options:
            files.append(f"{file} ({kind} {name})")
    if files:
        said.append("model files " + ", ".join(files))
    return said


@dataclass
class Server:
    """One server as this process sees it."""

    spec: ComfyUIServer
    headers: dict[str, str]
    in_flight: int = 0
    queue: int = 0  # running + pending in its /queue at the last check
    failures: int = 0  # checks and prompts it failed to answer, in all
    down_checks: int = 0  # checks failed in a row
    up: bool = True  # until a check or a prompt says otherwise
    last_seen: float | None = None  # wall clock of its last answer
    info: dict[str, Any] | None = None
    info_at: float = -1e9  # monotonic
    next_check: float = 0.0  # monotonic
    drained: bool = False  # by a person (the comfyui_drains table), whatever its configuration

    @property
    def draining(self) -> bool:
        return self.spec.draining or self.drained

    @property
    def url(self) -> str:
        return self.spec.base_url

    @property
    def name(self) -> str:
        return self.spec.label

    @property
    def load(self) -> int:
        return max(self.in_flight, self.queue)

    @property
    def free(self) -> bool:
        return self.up and not self.draining and self.in_flight < self.spec.max_in_flight


@dataclass
class _Waiter:
    account: str
    needs: Needs
    exclude: frozenset[str]
    seq: int
    future: asyncio.Future[Server]


@dataclass
class Fleet:
    """The servers of one credential (or the shared pool) in this process."""

    key: str
    settings: Settings
    account_limit: int | None = None
    secrets: tuple[str, ...] = ()
    servers: dict[str, Server] = field(default_factory=dict)
    waiters: list[_Waiter] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)  # per account
    served: Counter[str] = field(default_factory=Counter)  # per account, prompts given a slot
    last_used: float = field(default_factory=time.monotonic)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _task: asyncio.Task[None] | None = None
    # One open client per server and purpose (prompts, checks): kept-alive connections
    # spare each prompt a connection set-up while the next one waits for the slot.
    _apis: dict[tuple[str, bool], policy.Provider] = field(default_factory=dict)
    _fetches: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    # One WebSocket per server, shared by the prompts on it (comfyui_listener.py).
    _listeners: dict[str, Listener] = field(default_factory=dict)
    _closing: set[asyncio.Future[None]] = field(default_factory=set)  # held until done

    # ------------------------------------------------------------------ membership

    def update(self, specs: Iterable[ComfyUIServer], headers: Mapping[str, str]) -> None:
        """The servers as configured now (a credential edited, draining set): counters of
        servers kept are kept; a server no longer listed keeps no slot."""
        wanted = {s.base_url: s for s in specs}
        for url in list(self.servers):
            if url not in wanted and self.servers[url].in_flight == 0:
                del self.servers[url]
                listener = self._listeners.pop(url, None)
                if listener is not None:
                    closing = asyncio.ensure_future(listener.close())
                    self._closing.add(closing)
                    closing.add_done_callback(self._closing.discard)
        for url, spec in wanted.items():
            own = {"Authorization": f"Bearer {spec.bearer_token}"} if spec.bearer_token else {}
            server = self.servers.get(url)
            if server is None:
                server = self.servers[url] = Server(spec, {**headers, **own})
            else:
                server.spec, server.headers = spec, {**headers, **own}
            server.drained = (self.key, url) in _drained()
        self._dispatch()

    def redrain(self) -> None:
        """The servers drained by a person as ``set_drained`` last said; a server undrained
        takes the prompts waiting for a slot at once."""
        drained = _drained()
        for url, server in self.servers.items():
            server.drained = (self.key, url) in drained
        self._dispatch()

    def listed(self) -> list[Server]:
        return list(self.servers.values())

    # ------------------------------------------------------------------ slots

    async def lease(self, account: str, needs: Needs, exclude: Iterable[str] = ()) -> Server:
        """A slot on a server that can run ``needs`` (not in ``exclude``), waiting for one;
        NodeFailure at once when no server can run it. Give it back with ``release``."""
        self._start()
        excluded = frozenset(exclude)
        await self._know(needs, excluded)
        future: asyncio.Future[Server] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(account, needs, excluded, next(self._seq), future)
        self.waiters.append(waiter)
        self._dispatch()
        try:
            return await future
        except asyncio.CancelledError:
            if waiter in self.waiters:
                self.waiters.remove(waiter)
            if future.done() and not future.cancelled():
                self.release(future.result(), account)
            raise

    def take(self, url: str, account: str) -> Server | None:
        """A slot on this very server (a prompt it already holds, after a restart), even
        above its limit: the prompt is there whatever we count. None if it is not listed
        or not answering."""
        server = self.servers.get(url)
        if server is None or not server.up:
            return None
        self._give(server, account)
        return server

    def release(self, server: Server, account: str) -> None:
        server.in_flight = max(0, server.in_flight - 1)
        self.in_flight[account] = max(0, self.in_flight[account] - 1)
        self.last_used = time.monotonic()
        self._dispatch()

    def _give(self, server: Server, account: str) -> None:
        server.in_flight += 1
        self.in_flight[account] += 1
        self.served[account] += 1
        self.last_used = time.monotonic()

    def _fits(self, server: Server, needs: Needs) -> bool:
        return server.info is not None and not lacking(needs, server.info)

    def _dispatch(self) -> None:
        """Give free slots to waiters: the account with the fewest in flight first, then the
        one served least, then the oldest request; an account at its limit waits."""
        while True:
            best: tuple[tuple[int, int, int], _Waiter, Server] | None = None
            for waiter in self.waiters:
                if waiter.future.done():
                    continue
                limit = self.account_limit
                if limit is not None and self.in_flight[waiter.account] >= limit:
                    continue
                rank = (self.in_flight[waiter.account], self.served[waiter.account], waiter.seq)
                if best is not None and rank >= best[0]:
                    continue
                free = [
                    s
                    for s in self.servers.values()
                    if s.free and s.url not in waiter.exclude and self._fits(s, waiter.needs)
                ]
                if free:
                    best = (rank, waiter, min(free, key=lambda s: (s.load, s.queue, s.url)))
            if best is None:
                return
            _, waiter, server = best
            self.waiters.remove(waiter)
            self._give(server, waiter.account)
            waiter.future.set_result(server)

    # ------------------------------------------------------------------ what servers have

    async def _know(self, needs: Needs, exclude: frozenset[str]) -> None:
        """Every server's /object_info known; NodeFailure when no server can run ``needs``
        (after fetching them again, if they are older than MISS_REFRESH)."""
        candidates = [s for s in self.servers.values() if s.url not in exclude]
        await self._fetch([s for s in candidates if s.info is None and s.up])
        if any(self._fits(s, needs) for s in candidates if not s.draining):
            return
        stale = time.monotonic() - MISS_REFRESH
        await self._fetch([s for s in candidates if s.info_at < stale])
        usable = [s for s in candidates if not s.draining]
        if any(self._fits(s, needs) for s in usable):
            return
        said = []
        for server in self.servers.values():
            if server.url in exclude:
                said.append(f"{server.name}: stopped answering during this prompt")
            elif server.draining:
                said.append(f"{server.name}: draining")
            elif server.info is None:
                said.append(f"{server.name}: not answering")
            else:
                said.append(f"{server.name}: lacks " + "; ".join(lacking(needs, server.info)))
        raise NodeFailure(
            "no ComfyUI server of the fleet can run this workflow — " + " | ".join(said),
            "provider_error",
        )

    async def _fetch(self, servers: list[Server]) -> None:
        """/object_info of ``servers``, at once (one fetch per server at a time)."""
        tasks = []
        for server in servers:
            task = self._fetches.get(server.url)
            if task is None or task.done():
                task = asyncio.ensure_future(self._object_info(server))
                self._fetches[server.url] = task
            tasks.append(task)
        if tasks:
            await asyncio.gather(*(asyncio.shield(t) for t in tasks), return_exceptions=True)

    async def api(self, server: Server, *, quick: bool = False) -> policy.Provider:
        """The open client of ``server`` (``quick``: for checks, one try, CHECK_TIMEOUT),
        with the server's headers as configured now."""
        key = (server.url, quick)
        api = self._apis.get(key)
        if api is not None and api.headers == server.headers:
            return api
        settings = self.settings
        if quick:
            settings = settings.model_copy(
                update={"provider_max_retries": 0, "provider_timeout_seconds": CHECK_TIMEOUT}
            )
        api = policy.Provider(
            settings,
            name=f"ComfyUI ({server.name})",
            base_url=server.url,
            headers=server.headers,
            secrets=(*self.secrets, *(t for t in [server.spec.bearer_token] if t)),
        )
        await api.__aenter__()
        old, self._apis[key] = self._apis.get(key), api
        if old is not None:
            await old.__aexit__(None, None, None)
        return api

    def listener(self, server: Server) -> Listener:
        """The shared WebSocket of ``server`` (opened by its first subscription)."""
        listener = self._listeners.get(server.url)
        if listener is None:

            async def client() -> ComfyUIClient:
                return ComfyUIClient(await self.api(server))

            listener = self._listeners[server.url] = Listener(client)
        return listener

    async def holder_of(self, prompt_id: str, account: str) -> Server | None:
        """A slot on the server that has ``prompt_id`` (finished or queued), if one does:
        a prompt whose id was stored but whose server was not, found after a restart."""
        for server in self.servers.values():
            try:
                client = ComfyUIClient(await self.api(server, quick=True))
                found = await client.history(prompt_id) is not None or await client.queued(
                    prompt_id
                )
            except (NodeFailure, httpx.HTTPError, OSError):
                continue
            if found:
                return self.take(server.url, account)
        return None

    async def _object_info(self, server: Server) -> None:
        try:
            api = await self.api(server, quick=True)
            info = await api.json("GET", "object_info")
        except (NodeFailure, httpx.HTTPError, OSError):
            self._missed(server)
            return
        server.info, server.info_at = info, time.monotonic()
        self._seen(server)

    # ------------------------------------------------------------------ health

    async def answers(self, server: Server) -> bool:
        """Whether ``server`` answers ``GET /queue`` now (its queue length noted); one that
        does not is taken out until a later check finds it again."""
        try:
            api = await self.api(server, quick=True)
            body = await api.json("GET", "queue")
        except (NodeFailure, httpx.HTTPError, OSError):
            self._missed(server)
            return False
        running, pending = body.get("queue_running"), body.get("queue_pending")
        server.queue = sum(len(x) for x in (running, pending) if isinstance(x, list))
        self._seen(server)
        return True

    def _seen(self, server: Server) -> None:
        was = server.up
        server.up, server.down_checks, server.last_seen = True, 0, time.time()
        server.next_check = time.monotonic() + self.settings.comfyui_check_seconds
        if not was:
            self._dispatch()

    def _missed(self, server: Server) -> None:
        server.up = False
        server.failures += 1
        server.down_checks += 1
        wait = self.settings.comfyui_check_seconds * 2 ** (server.down_checks - 1)
        server.next_check = time.monotonic() + min(CHECK_MAX, wait)

    def _start(self) -> None:
        self.last_used = time.monotonic()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """Check each server when its turn comes; end after IDLE_STOP with nothing to do."""
        step = min(1.0, self.settings.comfyui_check_seconds / 2)
        while True:
            now = time.monotonic()
            idle = not self.waiters and not any(self.in_flight.values())
            if idle and now - self.last_used > IDLE_STOP:
                return
            due = [s for s in self.servers.values() if s.next_check <= now]
            if due:
                await asyncio.gather(*(self.answers(s) for s in due))
                old = now - self.settings.comfyui_object_info_seconds
                await self._fetch([s for s in due if s.up and s.info_at < old])
            await asyncio.sleep(step)

    async def close(self) -> None:
        for task in [self._task, *self._fetches.values()]:
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for listener in self._listeners.values():
            await listener.close()
        self._listeners.clear()
        for api in self._apis.values():
            await api.__aexit__(None, None, None)
        self._apis.clear()


# ----------------------------------------------------------------------------- the registry

# Per event loop (a test's loop, the server's): fleets hold futures and tasks of their loop.
_FLEETS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Fleet]] = (
    weakref.WeakKeyDictionary()
)


# Per event loop too: the servers drained by a person, as (fleet key, base URL).
_DRAINED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, frozenset[tuple[str, str]]] = (
    weakref.WeakKeyDictionary()
)


def server_id(fleet: str, base_url: str) -> str:
    """A server's id in the API: stable, and naming neither its URL nor its credential."""
    return hashlib.sha256(f"{fleet}\n{base_url}".encode()).hexdigest()[:32]


def _drained() -> frozenset[tuple[str, str]]:
    try:
        return _DRAINED.get(asyncio.get_running_loop(), frozenset())
    except RuntimeError:
        return frozenset()


def set_drained(drained: Iterable[tuple[str, str]]) -> None:
    """The servers drained by a person now (every one, as (fleet key, base URL)), for this
    event loop's fleets: a drained server gets no new prompt from here on."""
    now = frozenset(drained)
    loop = asyncio.get_running_loop()
    if _DRAINED.get(loop) == now:
        return
    _DRAINED[loop] = now
    for fleet in fleets():
        fleet.redrain()


def fleets() -> list[Fleet]:
    """This event loop's fleets."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return []
    return list(_FLEETS.get(loop, {}).values())


async def close_all() -> None:
    """Stop this event loop's fleets: their health checks end, their clients close."""
    for fleet in fleets():
        await fleet.close()
    with contextlib.suppress(RuntimeError):
        _FLEETS.pop(asyncio.get_running_loop(), None)
        _DRAINED.pop(asyncio.get_running_loop(), None)


def fleet_of(settings: Settings, credential: policy.Credential) -> Fleet | None:
    """The fleet a comfyui credential names (None: one ``base_url``, no fleet)."""
    shared = credential.fields.get("shared_pool") is True
    listed = credential.fields.get("servers")
    if not shared and not listed:
        return None
    if shared:
        if not settings.comfyui_pool:
            raise NodeFailure(
                "the comfyui credential asks for the shared pool, but this server has none "
                "(NODELOOM_COMFYUI_POOL)",
                "invalid_credential",
            )
        key, specs, headers, limit = (
            POOL,
            settings.comfyui_pool,
            {},
            (settings.comfyui_pool_account_limit),
        )
        secrets: tuple[str, ...] = ()
    else:
        key, limit = f"credential:{credential.id}", None
        specs = [ComfyUIServer.model_validate(s) for s in listed or []]
        headers, secrets = auth_headers(credential), tuple(credential.secret.values())
    registry = _FLEETS.setdefault(asyncio.get_running_loop(), {})
    fleet = registry.get(key)
    if fleet is None:
        fleet = registry[key] = Fleet(key, settings, limit, secrets)
    fleet.settings, fleet.account_limit, fleet.secrets = settings, limit, secrets
    fleet.update(specs, headers)
    return fleet


def snapshot() -> list[dict[str, Any]]:
    """Each server of this process's fleets as ``/metrics``, the operator page and other
    processes (comfyui_reports.py) see it."""
    return [
        {
            "fleet": fleet.key,
            "server": server.name,
            "url": server.url,
            "in_flight": server.in_flight,
            "queue": server.queue,
            "up": server.up,
            "draining": server.draining,
            "failures": server.failures,
            "last_seen": server.last_seen,
        }
        for fleet in fleets()
        for server in fleet.listed()
    ]


GAUGES = (
    ("nodeloom_comfyui_server_in_flight", "Prompts the process has on the server.", "in_flight"),
    ("nodeloom_comfyui_server_queue", "Prompts in the server's /queue at the last check.", "queue"),
    ("nodeloom_comfyui_server_up", "1 while the server answers its checks.", "up"),
    ("nodeloom_comfyui_server_draining", "1 while the server is draining.", "draining"),
    ("nodeloom_comfyui_server_failures_total", "Checks and prompts it did not answer.", "failures"),
    ("nodeloom_comfyui_server_last_seen_seconds", "Unix time of its last answer.", "last_seen"),
)


def render_metrics(others: Mapping[str, list[dict[str, Any]]] | None = None) -> str:
    """Per server of this process's fleets, and of the ``others`` processes' reports (by
    process: labelled ``process``), in the Prometheus text format."""
    rows: list[tuple[str | None, dict[str, Any]]] = [(None, r) for r in snapshot()]
    rows += [(process, r) for process, report in (others or {}).items() for r in report]
    if not rows:
        return ""
    lines: list[str] = []
    for name, help_, field_ in GAUGES:
        kind = "counter" if name.endswith("_total") else "gauge"
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        for process, row in rows:
            labels = f'fleet="{_label(row.get("fleet"))}",server="{_label(row.get("server"))}"'
            if process is not None:
                labels += f',process="{_label(process)}"'
            value = row.get(field_)
            number = float(value) if isinstance(value, int | float) else 0.0
            lines.append(f"{name}{{{labels}}} {number:.15g}")  # a Unix time whole
    return "\n".join(lines) + "\n"


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
