"""What the client commands share: the ``--url`` / ``--api-key`` / ``--json`` options, the
client they open, how errors and listings are printed.

Data goes to stdout (tables, JSON), everything else (progress, notes, errors) to stderr, so
``nodeloom workflows list --json | jq`` and ``nodeloom run X --wait > out.txt`` stay clean.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from nodeloom.client import Client
from nodeloom.client.errors import (
    APIError,
    ConnectionFailed,
    InvalidCredentials,
    JwtRequired,
    NodeloomClientError,
    Unauthorized,
)

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Server address. Default: $NODELOOM_URL, else the one `nodeloom login` stored.",
        show_default=False,
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="API key or JWT. Default: $NODELOOM_API_KEY, else the stored login.",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON (full ids, every field) instead of a table.")
]
LimitOption = Annotated[int, typer.Option("--limit", min=1, help="Show at most this many.")]
WorkflowArg = Annotated[str, typer.Argument(help="Workflow id, or its exact name.")]


def out() -> Console:
    """stdout; wide enough that no id is ever cut (see ``print_table``)."""
    return Console(highlight=False)


def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    err().print(f"[red]error:[/red] {message}", soft_wrap=True)
    raise typer.Exit(code)


def _hint(exc: APIError) -> str:
    if isinstance(exc, JwtRequired):
        return "API keys are managed with a log-in token: run `nodeloom login`."
    if isinstance(exc, Unauthorized | InvalidCredentials):
        return "Run `nodeloom login`, or pass --api-key / set NODELOOM_API_KEY."
    return ""


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Turn client errors into one clear message on stderr and exit status 1."""
    try:
        yield
    except APIError as exc:
        lines = [f"{exc.detail} ({exc.problem_code or exc.http_status})"]
        lines += [f"  {p.pointer or '(body)'}: {p.message}" for p in exc.errors]
        hint = _hint(exc)
        if hint:
            lines.append(hint)
        fail("\n".join(lines))
    except ConnectionFailed as exc:
        fail(f"{exc}\nIs the server running? Check --url or NODELOOM_URL.")
    except (NodeloomClientError, ValueError, OSError) as exc:
        fail(str(exc))


@contextlib.contextmanager
def client(url: str | None, api_key: str | None) -> Iterator[Client]:
    with handled(), Client(url, api_key) as opened:
        yield opened


def dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [dump(v) for v in value]
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(dump(value), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A table whose cells are never cut or wrapped: ids must survive copy and paste, so the
    table is printed as wide as it needs, whatever the terminal (or pipe) width."""
    table = Table(*columns, box=None, pad_edge=False, header_style="bold")
    for column in table.columns:
        column.no_wrap = True
        column.overflow = "ignore"
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console = out()
    needed = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    if needed > console.width:
        console = Console(highlight=False, width=needed)
    console.print(table, crop=False)


Item = TypeVar("Item")


def print_listing(
    items: Sequence[Item],
    as_json: bool,
    columns: Sequence[str],
    row: Callable[[Item], Sequence[object]],
) -> None:
    """What a ``list`` command prints: the items as JSON with --json, else a table of one
    ``row`` per item."""
    if as_json:
        print_json(items)
        return
    print_table(columns, (row(item) for item in items))


def take(items: Iterable[Any], limit: int) -> list[Any]:
    taken: list[Any] = []
    for item in items:
        if len(taken) >= limit:
            break
        taken.append(item)
    return taken


def when(value: Any) -> str:
    """A timestamp as people read it: ``2026-11-22 06:00:00`` (UTC)."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""
