"""What the client commands share: the ``--url`` / ``--api-key`` / ``--json`` options, the
client they open, how errors and listings are printed.

The three options are given once, before the command (``nodeloom --url U --json runs list``),
on the root callback (``root_options``). A command of a ``ClientTyper`` (or decorated with
``client_options`` / ``json_option``) also accepts them after its name, hidden from its
help, as every command did before they moved to the root: scripts written then keep
working, and a value given after the command wins over the root's. The commands read them
with ``client()`` and ``wants_json()``.

Data goes to stdout (tables, JSON), everything else (progress, notes, errors) to stderr, so
``nodeloom --json workflows list | jq`` and ``nodeloom run X --wait > out.txt`` stay clean.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn, TypeVar, cast

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from typer.models import CommandFunctionType

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


@dataclass(frozen=True)
class Target:
    """The server, the credential and the output format the command line asked for."""

    url: str | None = None
    api_key: str | None = None
    as_json: bool = False


Command = TypeVar("Command", bound=Callable[..., Any])

# The options of the command line being run: set by the root callback, then by a command
# given its own. A context variable, reset when the command line is done, so that commands
# run one after the other in one process (tests) never see another's.
_NONE_GIVEN = Target()  # frozen: one shared default is safe
_TARGET: ContextVar[Target] = ContextVar("nodeloom_cli_target", default=_NONE_GIVEN)


def target() -> Target:
    return _TARGET.get()


def wants_json() -> bool:
    return target().as_json


def root_options(
    ctx: typer.Context,
    url: str | None,
    api_key: str | None,
    as_json: bool,
) -> None:
    """Called by the root callback with the options given before the command."""
    token = _TARGET.set(Target(url, api_key, as_json))
    ctx.call_on_close(lambda: _TARGET.reset(token))


# The hidden forms a command accepts after its name, by parameter name, with their defaults.
_ALIASES: dict[str, tuple[Any, object]] = {
    "url": (Annotated[str | None, typer.Option("--url", hidden=True)], None),
    "api_key": (Annotated[str | None, typer.Option("--api-key", hidden=True)], None),
    "as_json": (Annotated[bool, typer.Option("--json", hidden=True)], False),
}


def accepting(*names: str) -> Callable[[Command], Command]:
    """A command that also takes the root options ``names`` after its name (hidden from its
    help), a value given there winning over the root's (module doc)."""

    def decorate(fn: Command) -> Command:
        signature = inspect.signature(fn, eval_str=True)
        added = [name for name in names if name not in signature.parameters]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name, None) for name in added}
            chosen = dataclasses.replace(target(), **{k: v for k, v in given.items() if v})
            token = _TARGET.set(chosen)
            try:
                return fn(*args, **kwargs)
            finally:
                _TARGET.reset(token)

        aliases = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, annotation=_ALIASES[name][0],
                default=_ALIASES[name][1],
            )
            for name in added
        ]  # fmt: skip
        # Typer reads a command's options from its signature.
        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*signature.parameters.values(), *aliases]
        )
        return cast(Command, command)

    return decorate


client_options = accepting("url", "api_key", "as_json")
json_option = accepting("as_json")


class ClientTyper(typer.Typer):
    """A group of client commands, each taking the root options after its name too."""

    def command(
        self, *args: Any, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        register = super().command(*args, **kwargs)
        return lambda fn: register(client_options(fn))


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
def client() -> Iterator[Client]:
    """The client of this command line's server and credential (else NODELOOM_URL /
    NODELOOM_API_KEY, else the stored login: the Python client's own order)."""
    given = target()
    with handled(), Client(given.url, given.api_key) as opened:
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
    columns: Sequence[str],
    row: Callable[[Item], Sequence[object]],
) -> None:
    """What a ``list`` command prints: the items as JSON with --json, else a table of one
    ``row`` per item."""
    if wants_json():
        print_json(items)
        return
    print_table(columns, (row(item) for item in items))


def print_made(value: Any, note: str, handle: str) -> None:
    """What a command that makes something prints: all of it as JSON with --json; else
    ``note`` for the person (stderr) and ``handle``, the one value a script takes (an id, a
    key, a URL), alone on stdout."""
    if wants_json():
        print_json(value)
        return
    err().print(note)
    print(handle)


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
