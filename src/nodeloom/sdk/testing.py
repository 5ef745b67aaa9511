"""Run one node on given inputs without a server: for a package's own tests.

    from nodeloom.sdk.testing import artifact, run_node

    def test_watermark(tmp_path):
        image = artifact(png_bytes, "image/png", tmp_path)
        produced = run_node(Watermark(), {"text": "hi"}, {"image": image}, tmp_path)
        assert produced.read_bytes().startswith(b"\\x89PNG")

``run_node`` validates the params with the node's own model, as the server does, and runs
the node with a context whose scratch directory is under ``workdir``. It runs the node in
this process, without the sandbox's budgets.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from nodeloom.sdk._node import ArtifactRef, InputValue, NodeType, Produced

__all__ = ["TestContext", "artifact", "produced_bytes", "run_node"]

T = TypeVar("T")


class TestContext:
    """A ``NodeContext`` for tests: records every progress report in ``progress_reports``."""

    __test__ = False  # not a pytest test class

    def __init__(self, workdir: Path, run_id: str = "run_test", node_id: str = "n1") -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.progress_reports: list[float] = []
        self._scratch = workdir / f"scratch-{node_id}"

    @property
    def scratch_dir(self) -> Path:
        self._scratch.mkdir(parents=True, exist_ok=True)
        return self._scratch

    async def progress(self, fraction: float) -> None:
        self.progress_reports.append(min(1.0, max(0.0, float(fraction))))

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        return await asyncio.to_thread(functools.partial(fn, *args))


def artifact(
    data: bytes,
    content_type: str,
    workdir: Path,
    *,
    width: int | None = None,
    height: int | None = None,
    duration_ms: int | None = None,
) -> ArtifactRef:
    """An input artifact holding ``data``, written to a file under ``workdir``."""
    digest = hashlib.sha256(data).hexdigest()
    path = workdir / f"input-{digest[:16]}"
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return ArtifactRef(
        artifact_id=f"art_{digest[:12]}",
        content_type=content_type,
        sha256=digest,
        size_bytes=len(data),
        path=path,
        width=width,
        height=height,
        duration_ms=duration_ms,
    )


def run_node(
    node: NodeType,
    params: Mapping[str, Any],
    inputs: Mapping[str, InputValue],
    workdir: Path,
    *,
    context: TestContext | None = None,
) -> Produced:
    """Validate ``params`` with ``node.spec.params`` and run the node once. Raises the
    node's ``NodeFailure`` as it is, and pydantic's ``ValidationError`` for bad params."""
    model = node.spec.params.model_validate(dict(params))
    ctx = context or TestContext(workdir)
    for spec_input in node.spec.inputs:
        if spec_input.required and inputs.get(spec_input.name) is None:
            raise ValueError(f"input {spec_input.name!r} is required")
    return asyncio.run(_run(node, ctx, model, inputs))


async def _run(
    node: NodeType, ctx: TestContext, params: Any, inputs: Mapping[str, InputValue]
) -> Produced:
    return await node.run(ctx, params, dict(inputs))  # type: ignore[arg-type]


def produced_bytes(produced: Produced) -> bytes:
    """The bytes of a node's result, whether it returned them or wrote a file."""
    if produced.data is not None:
        return produced.data
    if produced.path is None:
        raise ValueError("the node produced neither data nor a file")
    return produced.path.read_bytes()
