"""The public interface for writing Nodeloom node types: everything a node package needs.

A node is data plus one function: a ``NodeSpec`` (type name, inputs, output kind, params
model, cost) and an async ``run(ctx, params, inputs)`` that returns ``Produced``. A package
publishes its nodes with one ``NodePackage`` object named by an entry point in the group
``nodeloom.nodes``; the entry point's name is the package's namespace, so its type
``Watermark`` is known to the server as ``acme.Watermark``.

Only the names exported here are public and versioned (``SDK_VERSION``, semantic versioning:
a minor release adds, a major release may remove or change). Everything else in ``nodeloom``
is private and may change in any release. A package's node runs only in a sandbox process,
under the same CPU, memory and time budgets as the built-in nodes; its context offers its own
inputs, a scratch directory and progress reporting, nothing of the server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from nodeloom.sdk._node import (
    ArtifactRef,
    Cost,
    Input,
    InputValue,
    Kind,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
    input_text,
    spec_family,
)
from nodeloom.sdk._version import SDK_VERSION, sdk_range_problem

__all__ = [
    "SDK_VERSION",
    "ArtifactRef",
    "Cost",
    "Input",
    "InputValue",
    "Kind",
    "NodeContext",
    "NodeFailure",
    "NodePackage",
    "NodeSpec",
    "NodeType",
    "Output",
    "Params",
    "Produced",
    "input_text",
    "sdk_range_problem",
    "spec_family",
]

T = TypeVar("T")


class NodeContext(Protocol):
    """What a running node is given besides its params and inputs.

    Cancellation needs no code: a cancelled node's sandbox process is stopped and its scratch
    directory removed. A node that runs long should report ``progress`` now and then."""

    run_id: str
    node_id: str

    @property
    def scratch_dir(self) -> Path:
        """A directory private to this execution, removed afterwards. Write large outputs
        here and return them as ``Produced(path=...)``."""

    async def progress(self, fraction: float) -> None:
        """Report progress from 0 to 1 (shown live in the editor; rate-limited)."""

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        """Run blocking work (Pillow, NumPy, an encoder) off the node's event loop."""


@dataclass(frozen=True)
class NodePackage:
    """What a package's ``nodeloom.nodes`` entry point names.

    ``sdk`` is the range of SDK versions the package was built for, as comma-separated
    clauses (``">=1.0,<2"``); the server refuses a package whose range excludes its
    ``SDK_VERSION``. ``nodes`` are instances of the package's ``NodeType`` subclasses, whose
    spec types are short names (``Watermark``) that the server prefixes with the namespace.

    Importing the module that defines this object must have no side effect (no network, no
    files, no threads): the server imports it to read the specs."""

    sdk: str
    nodes: Sequence[NodeType] = field(default_factory=tuple)
