"""``nodeloom nodes list|new``: the node types this server would load, and a new node package.

``list`` reads the installed packages as ``nodeloom serve`` would with the same environment
(``NODELOOM_NODE_PACKAGES``, ``NODELOOM_DISABLED_NODE_PACKAGES``), so an operator sees what a
start would load and why a package was refused, without starting the server. ``new`` writes
a package skeleton whose tests pass as written (see docs/node-packages.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from nodeloom.commands.common import err, json_option, print_listing
from nodeloom.nodes.registry import build_registry, package_of
from nodeloom.sdk import SDK_VERSION
from nodeloom.settings import Settings
from nodeloom.version import __version__

app = typer.Typer(help="Node types and node packages.", no_args_is_help=True)

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@app.command("list")
@json_option
def list_command() -> None:
    """Every node type with its package, version and status, and every refused package."""
    settings = Settings()
    registry = build_registry(settings=settings)
    rows: list[dict[str, object]] = []
    for node in registry:
        package = package_of(node)
        reason = node.unavailable_reason(settings)
        rows.append(
            {
                "type": node.spec.type,
                "package": package.name if package else "(built in)",
                "version": package.version if package else __version__,
                "status": "available" if reason is None else "unavailable",
                "reason": reason,
            }
        )
    for info in registry.packages:
        if not info.types or info.status in ("refused", "disabled"):
            rows.append(
                {
                    "type": f"{info.namespace}.*",
                    "package": info.name,
                    "version": info.version,
                    "status": info.status,
                    "reason": info.reason,
                }
            )
    print_listing(
        rows,
        ["TYPE", "PACKAGE", "VERSION", "STATUS", "REASON"],
        lambda r: [r["type"], r["package"], r["version"], r["status"], r["reason"] or ""],
    )


@app.command("new")
def new_command(
    name: Annotated[str, typer.Argument(help="Namespace of the package: lowercase, digits, _.")],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Where to write it (default ./nodeloom-NAME).")
    ] = None,
) -> None:
    """Write a new node package (one example node, its tests, pyproject, README)."""
    if not _NAME.match(name):
        err().print(f"[red]{name!r} is not a namespace: lowercase letters, digits and _[/red]")
        raise typer.Exit(2)
    dist = f"nodeloom-{name.replace('_', '-')}"
    root = directory or Path(dist)
    if root.exists() and any(root.iterdir()):
        err().print(f"[red]{root} exists and is not empty[/red]")
        raise typer.Exit(1)
    module = f"nodeloom_{name}"
    major = SDK_VERSION.split(".")[0]
    values = {
        "name": name,
        "dist": dist,
        "module": module,
        "sdk": f">={major}.0,<{int(major) + 1}",
    }
    for relative, template in _FILES.items():
        path = root / relative.format(**values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**values), encoding="utf-8")
    print(f"wrote {root}: pip install -e {root} && nodeloom nodes list")


_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "Nodeloom node package {name}."
requires-python = ">=3.11"
dependencies = []

[project.entry-points."nodeloom.nodes"]
# The entry point's name is the namespace of this package's types ({name}.Shout).
{name} = "{module}:package"

[tool.setuptools.packages.find]
where = ["src"]
"""

_MODULE = '''\
"""The node types of {dist}. Import only from nodeloom.sdk; importing this module must do
nothing else (the server imports it to read the specs)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from nodeloom.sdk import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodePackage,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
)


class ShoutParams(Params):
    exclamations: int = Field(default=1, ge=0, le=10, description="How many ! to add.")


class Shout(NodeType):
    spec = NodeSpec(
        type="Shout",
        version=1,
        category="text",
        title="Shout",
        description="The text in capitals, with exclamation marks.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=ShoutParams,
        cost=Cost(credits=1),
    )

    async def run(
        self, ctx: NodeContext, params: ShoutParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = inputs["text"]
        assert text is not None and not isinstance(text, list)
        value = text.read_text()
        if not value.strip():
            raise NodeFailure("there is nothing to shout", code="empty_text")
        return Produced.text(value.upper() + "!" * params.exclamations)


package = NodePackage(sdk="{sdk}", nodes=[Shout()])
'''

_TEST = """\
from __future__ import annotations

from pathlib import Path

import pytest

from nodeloom.sdk import NodeFailure
from nodeloom.sdk.testing import artifact, produced_bytes, run_node
from {module} import Shout


def test_shouts(tmp_path: Path) -> None:
    text = artifact(b"hello", "text/plain", tmp_path)
    produced = run_node(Shout(), {{"exclamations": 2}}, {{"text": text}}, tmp_path)
    assert produced_bytes(produced) == b"HELLO!!"


def test_refuses_empty_text(tmp_path: Path) -> None:
    text = artifact(b"  ", "text/plain", tmp_path)
    with pytest.raises(NodeFailure):
        run_node(Shout(), {{}}, {{"text": text}}, tmp_path)
"""

_README = """\
# {dist}

A Nodeloom node package (namespace `{name}`), written by `nodeloom nodes new {name}`.

    pip install -e .        # into the Nodeloom server's environment, then restart it
    nodeloom nodes list     # shows {name}.Shout
    pytest tests            # runs the node with nodeloom.sdk.testing, no server needed

Built for SDK `{sdk}`. See docs/node-packages.md in the Nodeloom repository.
"""

_FILES = {
    "pyproject.toml": _PYPROJECT,
    "src/{module}/__init__.py": _MODULE,
    "tests/test_{name}.py": _TEST,
    "README.md": _README,
}
