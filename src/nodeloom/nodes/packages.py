"""Node packages: node types installed as Python distributions, found by entry point.

A distribution declares an entry point in the group ``nodeloom.nodes``; its name is the
package's namespace and its value names a ``nodeloom.sdk.NodePackage``. Its types join the
catalog as ``namespace.Type``. Every rule below refuses a package (logged, shown by
``nodeloom nodes list``), never stops the server:

- the operator's choice: ``Settings.node_packages`` (allow-list of distribution names; None
  means every installed one) and ``Settings.disabled_node_packages``; a package left out is
  not imported at all;
- a namespace that is not ``[a-z][a-z0-9_]*`` or that an earlier package (by distribution
  name) already claimed;
- an import that raises or takes longer than ``Settings.node_package_import_timeout``: each
  package is first imported in a child process without the server's environment, and only
  imported here if that finished in time;
- an entry point that does not name a ``NodePackage``, or a spec the registry refuses (a bad
  type name, a node that asks for the provider, the run's input or the event loop);
- an SDK range that excludes ``SDK_VERSION``: its types stay in the catalog as unavailable,
  so a workflow using them says why it cannot run.

The server never calls a package's code besides reading its specs and validating params with
its models: ``PackagedNode`` answers the server-side hooks (cost estimate, cache fingerprint,
cheap checks, inline execution) from the spec alone, and ``run``/``deep_problems`` happen in
a sandbox process, through a context that offers only the node's inputs and scratch directory.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

from nodeloom.child_environment import sandbox_environment
from nodeloom.nodes import type_rules
from nodeloom.sdk import NodePackage
from nodeloom.sdk._node import InputValue, NodeContext, NodeFailure, NodeSpec, NodeType, Produced
from nodeloom.sdk._version import SDK_VERSION, sdk_range_problem
from nodeloom.sdk.images import MediaLimits
from nodeloom.settings import Settings

log = logging.getLogger("nodeloom.nodes.packages")

GROUP = "nodeloom.nodes"
SANDBOX_ENV = "NODELOOM_SANDBOX_NODE_PACKAGES"
# How long a probe child may take to start importing its package: its interpreter and our
# own imports, which a busy machine slows (the package's own budget starts afterwards).
PROBE_START_SECONDS = 120.0
_NAMESPACE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
T = TypeVar("T")

Status = Literal["loaded", "incompatible", "refused", "disabled"]


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class PackageInfo:
    """One installed node package and what became of it."""

    name: str  # distribution name, canonical
    version: str
    namespace: str
    target: str  # the entry point's value, "module:attribute"
    status: Status = "loaded"
    reason: str | None = None
    sdk: str | None = None
    types: list[str] = field(default_factory=list)


class _PackageContext:
    """What a package's node sees of the executor's context: its ids, its scratch directory,
    progress and a thread pool. Not the settings, the account or the run's input: it keeps
    no reference to the executor's context (which holds them), only copies of its ids, the
    scratch path, the media limits, and the context's ``progress`` and ``to_thread``, which
    in a sandbox process are bound to objects that hold a socket and a thread pool and
    nothing else (sandbox/worker.py). Its job carries no run input and no account id either
    (engine/executor.py)."""

    __slots__ = ("_progress", "_scratch", "_to_thread", "limits", "node_id", "run_id")

    def __init__(self, ctx: NodeContext) -> None:
        self.run_id = ctx.run_id
        self.node_id = ctx.node_id
        self._scratch = ctx.scratch_dir
        self._progress: Callable[[float], Awaitable[None]] = ctx.progress
        self._to_thread: Callable[..., Awaitable[Any]] = ctx.to_thread
        settings = ctx.settings
        # The media limits only (nodeloom.sdk.images.limits reads them), not the settings.
        self.limits = MediaLimits(
            max_image_pixels=settings.max_image_pixels,
            max_media_seconds=settings.max_media_seconds,
            max_artifact_bytes=settings.max_artifact_bytes,
        )

    @property
    def scratch_dir(self) -> Path:
        return self._scratch

    async def progress(self, fraction: float) -> None:
        await self._progress(fraction)

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        result: T = await self._to_thread(fn, *args)
        return result


class PackagedNode(NodeType):
    """A package's node type as the server holds it (see the module docstring)."""

    package: PackageInfo
    inner: NodeType | None
    refused: str | None

    def run(
        self, ctx: NodeContext, params: Any, inputs: Mapping[str, InputValue]
    ) -> Awaitable[Produced]:
        if self.inner is None or self.refused is not None:
            raise NodeFailure(
                f"{self.spec.type} cannot run: {self.refused}", code="node_unavailable"
            )
        return self.inner.run(_PackageContext(ctx), params, inputs)  # type: ignore[arg-type]

    def estimate_seconds(self, params: Any) -> float:
        return float(getattr(params, "max_seconds", 0.0))

    def fingerprint(self, params: Any, settings: Settings) -> dict[str, Any]:
        # A new release of the package may compute something else: never reuse its outputs.
        return {"params": params.model_dump(mode="json"), "package": self.package.version}

    def deep_problems(self, params: Any) -> list[str]:
        return [] if self.inner is None else self.inner.deep_problems(params)

    def needs_deep_check(self, params: Any) -> bool:
        return self.inner is not None and (
            type(self.inner).deep_problems is not NodeType.deep_problems
        )

    def runs_inline(self, params: Any) -> bool:
        return False

    def unavailable_reason(self, settings: Settings) -> str | None:
        return self.refused


def wrap(node: object, info: PackageInfo, refused: str | None = None) -> PackagedNode | str:
    """The server's handle on one of a package's nodes, or why it is refused."""
    if not isinstance(node, NodeType) or not isinstance(getattr(node, "spec", None), NodeSpec):
        return f"{node!r} is not a NodeType with a NodeSpec"
    spec = node.spec
    if "." in spec.type:
        return f"type {spec.type!r} must be a short name; the namespace is added"
    if not spec.sandboxed or spec.adapter:
        return f"{spec.type}: a package's node must run in the sandbox (sandboxed=True)"
    if spec.needs_provider or spec.optional_provider or spec.uses_run_input:
        return f"{spec.type}: a package's node cannot use the provider or the run's input"
    full = dataclasses.replace(spec, type=f"{info.namespace}.{spec.type}")
    cls = type(f"Packaged_{info.namespace}_{spec.type}", (PackagedNode,), {"spec": full})
    wrapper: PackagedNode = cls()
    wrapper.package = info
    wrapper.inner = node
    wrapper.refused = refused
    return wrapper


def _probe(targets: list[str], timeout: float) -> dict[str, str | None]:
    """Import each target in its own child process, all at once; target -> problem. The
    children get the sandbox's environment: no secrets, no database address.

    A child says when it starts importing its target (one byte on stdout), and the
    package's ``timeout`` runs from then: the interpreter's own start and our imports are
    not the package's to pay, and on a loaded machine they alone can take seconds."""
    env = sandbox_environment()
    spawned = time.monotonic()
    procs: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}
    for target in targets:
        err = tempfile.TemporaryFile()
        proc = subprocess.Popen(  # noqa: S603 - our interpreter, a module we name
            [sys.executable, "-m", "nodeloom.nodes.probe", target],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        procs[target] = (proc, err)
    importing_since: dict[str, float] = {}
    problems: dict[str, str | None] = {}
    while len(problems) < len(procs):
        now = time.monotonic()
        for target, (proc, output) in procs.items():
            if target in problems:
                continue
            assert proc.stdout is not None
            if target not in importing_since and _said_started(proc.stdout):
                importing_since[target] = now
            problem = _failure(proc, output)
            if problem is None and proc.returncode is None:
                if now - importing_since.get(target, now) > timeout:
                    problem = f"importing it took longer than {timeout:g} s"
                elif target not in importing_since and now - spawned > PROBE_START_SECONDS:
                    problem = f"its import check did not start in {PROBE_START_SECONDS:g} s"
                else:
                    continue
                proc.kill()
                proc.wait()
            problems[target] = problem
            proc.stdout.close()
            output.close()
        if len(problems) < len(procs):
            time.sleep(0.02)
    return problems


def _said_started(stdout: IO[bytes]) -> bool:
    try:
        return bool(stdout.read(1))
    except BlockingIOError:
        return False


def _failure(proc: subprocess.Popen[bytes], output: IO[bytes]) -> str | None:
    """Why a child that exited failed (None: it imported, or it still runs)."""
    if proc.poll() is None or proc.returncode == 0:
        return None
    output.seek(0)
    lines = output.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
    return f"importing it failed: {(lines or ['no output'])[-1][:300]}"


def _load(target: str) -> object:
    module, _, attribute = target.partition(":")
    value: object = importlib.import_module(module.strip())
    for part in attribute.strip().split(".") if attribute.strip() else []:
        value = getattr(value, part)
    return value


def _nodes_of(info: PackageInfo, target: object) -> list[PackagedNode]:
    """The package's wrapped nodes; sets ``info``'s status when it is refused."""
    if not isinstance(target, NodePackage):
        info.status, info.reason = "refused", f"{info.target} is not a nodeloom.sdk.NodePackage"
        return []
    info.sdk = target.sdk
    incompatible = sdk_range_problem(target.sdk)
    if incompatible:
        info.status, info.reason = "incompatible", incompatible
    wrapped: list[PackagedNode] = []
    for node in target.nodes:
        result = wrap(
            node, info, refused=f"package {info.name} {info.reason}" if incompatible else None
        )
        if isinstance(result, str):
            info.status, info.reason = "refused", result
            return []
        try:
            type_rules.check(result)
            if any(w.spec.type == result.spec.type for w in wrapped):
                raise ValueError(type_rules.registered_twice(result.spec.type))
        except ValueError as exc:
            info.status, info.reason = "refused", str(exc)
            return []
        wrapped.append(result)
    info.types = [n.spec.type for n in wrapped]
    return wrapped


def _installed() -> list[tuple[EntryPoint, str, str]]:
    """The entry points of the group with their distributions, read again only when the
    places distributions are found in have changed (``_search_path_state``): reading every
    installed distribution's metadata takes ~10 ms, and tests build an app per test."""
    state = _search_path_state()
    found = _last_reading.get(state)
    if found is None:
        found = _read_installed()
        _last_reading.clear()
        _last_reading[state] = found
    return list(found)


def _search_path_state() -> tuple[tuple[str, int], ...]:
    """Each ``sys.path`` entry with the modification time of what it names. importlib finds
    distributions as ``*.dist-info`` (or ``*.egg-info``) folders in these directories, and
    installing, upgrading or removing one (pip, in any process) adds or deletes such a
    folder, which changes its directory's time; an entry added (``site.addsitedir``) changes
    the tuple."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, -1))
    return tuple(state)


def _read_installed() -> list[tuple[EntryPoint, str, str]]:
    found = []
    for ep in entry_points(group=GROUP):
        dist = ep.dist
        name = canonical(dist.name) if dist is not None else ep.value.partition(":")[0]
        version = dist.version if dist is not None else "0"
        found.append((ep, name, version))
    return sorted(found, key=lambda item: (item[1], item[0].name))


@dataclass
class Discovery:
    packages: list[PackageInfo]
    nodes: list[PackagedNode]


_cache: dict[tuple[Any, ...], Discovery] = {}
# The last reading of the installed entry points, by the state of the search path it saw.
_last_reading: dict[tuple[tuple[str, int], ...], list[tuple[EntryPoint, str, str]]] = {}
# The packages loaded by any registry of this process, which its sandbox processes import. A
# server has one; tests build registries with different settings side by side, and a server
# never sends a sandbox a type its own registry does not have.
_sandbox_packages: dict[str, dict[str, str]] = {}


def discover(settings: Settings) -> Discovery:
    """The installed node packages that ``settings`` admit, each probed and checked. The
    result is kept for the life of the process per set of installed packages and settings
    (a server reads them at start)."""
    installed = _installed()
    allowed = settings.node_packages
    key = (
        tuple((ep.name, ep.value, name, version) for ep, name, version in installed),
        None if allowed is None else tuple(sorted(canonical(n) for n in allowed)),
        tuple(sorted(canonical(n) for n in settings.disabled_node_packages)),
        settings.node_package_import_timeout,
    )
    if key not in _cache:
        _cache[key] = _discover(installed, settings)
    found = _cache[key]
    for p in found.packages:
        if p.status == "loaded":
            _sandbox_packages[p.target] = {
                "name": p.name,
                "version": p.version,
                "namespace": p.namespace,
                "target": p.target,
            }
    return found


def _discover(installed: list[tuple[EntryPoint, str, str]], settings: Settings) -> Discovery:
    allowed = (
        None if settings.node_packages is None else {canonical(n) for n in settings.node_packages}
    )
    disabled = {canonical(n) for n in settings.disabled_node_packages}
    infos: list[PackageInfo] = []
    claimed: dict[str, str] = {}
    for ep, name, version in installed:
        info = PackageInfo(name=name, version=version, namespace=ep.name, target=ep.value)
        infos.append(info)
        if allowed is not None and name not in allowed:
            info.status, info.reason = "disabled", "not in NODELOOM_NODE_PACKAGES"
        elif name in disabled:
            info.status, info.reason = "disabled", "in NODELOOM_DISABLED_NODE_PACKAGES"
        elif not _NAMESPACE.match(ep.name):
            info.status = "refused"
            info.reason = f"its namespace {ep.name!r} is not lowercase letters, digits and _"
        elif ep.name in claimed:
            info.status = "refused"
            info.reason = f"its namespace {ep.name!r} is already used by package {claimed[ep.name]}"
        else:
            claimed[ep.name] = name
    pending = [i for i in infos if i.status == "loaded"]
    probed = _probe([i.target for i in pending], settings.node_package_import_timeout)
    nodes: list[PackagedNode] = []
    for info in pending:
        problem = probed.get(info.target)
        if problem is None:
            try:
                nodes.extend(_nodes_of(info, _load(info.target)))
            except Exception as exc:  # a package's import is its own business
                problem = f"importing it failed: {type(exc).__name__}: {exc}"
        if problem is not None:
            info.status, info.reason = "refused", problem
    for info in infos:
        if info.status in ("refused", "incompatible"):
            log.warning(
                "node package %s %s (namespace %s) not loaded: %s",
                info.name,
                info.version,
                info.namespace,
                info.reason,
            )
        elif info.status == "loaded":
            log.info(
                "node package %s %s loaded: %s", info.name, info.version, ", ".join(info.types)
            )
    return Discovery(infos, [n for n in nodes if n.package.status in ("loaded", "incompatible")])


def sandbox_packages() -> str:
    """The loaded packages, for the sandbox fork server's environment (JSON); when it
    changes, the fork server is replaced (``Zygote.shared``)."""
    return json.dumps([_sandbox_packages[t] for t in sorted(_sandbox_packages)], sort_keys=True)


def sandbox_nodes(raw: str | None = None) -> list[PackagedNode]:
    """In a sandbox fork server: the nodes of the packages the server loaded (already
    probed there, so imported directly)."""
    raw = raw if raw is not None else os.environ.get(SANDBOX_ENV, "[]")
    nodes: list[PackagedNode] = []
    for item in json.loads(raw or "[]"):
        info = PackageInfo(
            name=item["name"],
            version=item["version"],
            namespace=item["namespace"],
            target=item["target"],
        )
        try:
            loaded = _nodes_of(info, _load(info.target))
        except Exception:
            log.exception("node package %s could not be imported in the sandbox", info.name)
            continue
        if info.status == "loaded":
            nodes.extend(loaded)
    return nodes


def describe(packages: Iterable[PackageInfo]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(p) for p in packages]


__all__ = ["SDK_VERSION", "Discovery", "PackageInfo", "PackagedNode", "discover"]
