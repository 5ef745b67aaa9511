"""Prepared statements: a Core statement compiled once and run straight on the driver
connection (SQLite's sqlite3, PostgreSQL's asyncpg), for the statements every request and
every step sends.

SQLAlchemy's ``Connection.execute`` costs ~15-25 µs per statement before SQLite sees it
(execution context, parameter processing, result set-up), more than SQLite takes to run an
indexed statement; with ~10 statements a run it was a fifth of a loaded server's CPU. A
``Prepared`` statement keeps what SQLAlchemy would compute anyway — the SQL text, the order
of its parameters, the dialect's bind and result processors (datetimes, JSON, booleans),
literal values baked into the statement — and does only the per-call part: order the values,
run the SQL on the same DB-API connection (so in the caller's transaction), shape the rows.
The sqlite3 module caches the prepared SQLite statement by its text.

On PostgreSQL the same plan (compiled for the asyncpg dialect: ``$n`` parameters with their
casts) runs on the asyncpg connection under SQLAlchemy's pooled one, in the caller's
transaction (db/engine.py runs it on that connection). asyncpg keeps each statement
prepared per connection (its statement cache), so a hot statement is one Bind/Execute round
trip, without SQLAlchemy's execution context, its adapter's per-statement bookkeeping
(a lock, a status regex) and its result set-up (issue #20: ~35% of an API replica's CPU was
in those execute paths). Rows are the same named tuples as on SQLite; errors are translated
by SQLAlchemy's adapter into what SQLAlchemy raises. A statement with an IN list (its
parameter numbering is rendered per call) or a RETURNING clause still goes through
``Connection.execute``. The statement stays the one Core object both databases share; only
how it is run differs.

What a ``Prepared`` statement takes: parameters by name (one mapping, or a list for a
multi-row statement), expanding ``IN`` parameters given as lists; an INSERT compiled for the
keys of its first parameters, with column defaults only when they are plain values.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.util import await_only

Params = Mapping[str, Any]
Statement = ClauseElement  # a select, insert, update or delete
_Processor = Callable[[Any], Any] | None
_EXPANDING = re.compile(r"__\[POSTCOMPILE_(\w+)\]")
# In a pooled PostgreSQL connection's ``info``: what counts a statement (db/engine.py).
STATEMENT_COUNTER = "nodeloom.count_statement"
_ROWCOUNT = re.compile(r"(\d+)$")
_DOLLAR = re.compile(r"\$(\d+)")
MAX_PARAMETERS = 32_767


class PreparedError(Exception):
    """A statement cannot be prepared (a programming error, caught by the tests)."""


@dataclass(frozen=True)
class _Slot:
    """Where one positional value comes from: the caller's ``name``, or a fixed value."""

    name: str | None
    value: Any
    process: _Processor
    expanding: bool


class _Plan:
    """One statement compiled for one dialect (and, for an INSERT, one set of keys)."""

    def __init__(self, statement: Statement, dialect: Dialect, keys: Sequence[str]) -> None:
        # Kept so that the dialect outlives the plan: plans are found by id(dialect), and the
        # id of a dialect that was collected can be a new one's (an SQLite plan handed to a
        # PostgreSQL connection: ``?`` placeholders, a syntax error).
        self.dialect = dialect
        defaults = _insert_defaults(statement, keys)
        column_keys = [*keys, *defaults] if isinstance(statement, Insert) else None
        if isinstance(statement, Insert) and statement.select is not None:
            # INSERT ... SELECT: SQLAlchemy adds the missing columns' defaults to the SELECT
            # itself, as parameters named after their columns (filled in below).
            column_keys = None
        # Not SQLite: compiled as for many rows, so an INSERT gets no implicit RETURNING of
        # its generated key (which would send it through SQLAlchemy).
        many: dict[str, Any] = {"for_executemany": dialect.name != "sqlite"}
        compiled = statement.compile(dialect=dialect, column_keys=column_keys, **many)
        assert isinstance(compiled, SQLCompiler)
        names = compiled.positiontup
        if names is None:
            raise PreparedError(f"{dialect.name} does not bind by position")
        given = set(keys)
        self.slots: list[_Slot] = []
        for name in names:
            bind = compiled.binds[name]
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if name in given:
                self.slots.append(_Slot(name, None, process, bind.expanding))
            elif name in defaults and column_keys is None:
                self.slots.append(_Slot(None, defaults[name], process, False))
            elif not bind.required:
                self.slots.append(_Slot(None, bind.effective_value, process, bind.expanding))
            elif name in defaults:
                self.slots.append(_Slot(None, defaults[name], process, False))
            else:
                raise PreparedError(f"no value for {name!r} in {compiled.string!r}")
        self.sql = compiled.string
        self.returns = bool(compiled.effective_returning)
        # Expanding parameters (IN lists) are rendered for the lengths of each call.
        self._pieces = _EXPANDING.split(self.sql)
        self.expands = any(slot.expanding for slot in self.slots)
        self._by_lengths: dict[tuple[int, ...], str] = {}
        # A plain INSERT ... VALUES (one placeholder per slot, nothing after): its rows can
        # go as one statement of several VALUES tuples (asyncpg, ``sql_rows``).
        self._values: tuple[str, str] | None = None
        self._by_rows: dict[int, str] = {}
        if isinstance(statement, Insert) and statement.select is None:
            head, sep, row = self.sql.rpartition(" VALUES ")
            numbers = [int(n) for n in _DOLLAR.findall(row)]
            if sep and not _DOLLAR.search(head) and numbers == list(range(1, len(self.slots) + 1)):
                if row.startswith("(") and row.endswith(")"):
                    self._values = (head + sep, row)
        self.row: type[tuple[Any, ...]] | None = None
        self.results: list[_Processor] = []
        if isinstance(statement, sa.Select | sa.CompoundSelect):
            columns = list(statement.selected_columns)
            # An unlabeled expression (``func.sum(...)``) has no key: such a column is reached
            # by index only, as in SQLAlchemy's rows, under a placeholder name.
            names = [c.key or f"_{i}" for i, c in enumerate(columns)]
            self.row = collections.namedtuple("Row", names, rename=True)  # type: ignore[misc]
            self.results = [
                c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns
            ]
        self.has_results = any(self.results)
        # Whether it can be a piece of one combined statement (``run_together``,
        # ``if_created``): its text fixed (no IN list), no rows to give back.
        self.combinable = not self.expands and not self.returns and self.row is None

    def values(self, params: Params) -> tuple[list[Any], tuple[int, ...]]:
        """The positional values, and the length of each expanding list."""
        out: list[Any] = []
        lengths: list[int] = []
        for slot in self.slots:
            value = params[slot.name] if slot.name is not None else slot.value
            if slot.expanding:
                items = list(value)
                lengths.append(len(items))
                process = slot.process
                out.extend(process(v) for v in items) if process else out.extend(items)
            else:
                out.append(slot.process(value) if slot.process else value)
        return out, tuple(lengths)

    @property
    def rows_per_statement(self) -> int:
        """How many rows ``sql_rows`` may carry (0: it cannot): PostgreSQL takes at most
        32,767 parameters a statement."""
        return MAX_PARAMETERS // max(1, len(self.slots)) if self._values is not None else 0

    def sql_rows(self, rows: int) -> str:
        """This INSERT for ``rows`` rows in one statement, their values one after another."""
        sql = self._by_rows.get(rows)
        if sql is None:
            assert self._values is not None
            head, row = self._values
            width = len(self.slots)
            tuples = [_shifted(row, i * width) for i in range(rows)]
            sql = self._by_rows[rows] = head + ", ".join(tuples)
        return sql

    def sql_for(self, lengths: tuple[int, ...]) -> str:
        if not lengths:
            return self.sql
        sql: str | None = self._by_lengths.get(lengths)
        if sql is None:
            parts = self._pieces
            rendered = [parts[0]]
            for i, length in enumerate(lengths):
                # An empty IN list matches nothing, as SQLAlchemy renders it.
                rendered.append(", ".join("?" * length) if length else "SELECT 1 WHERE 1!=1")
                rendered.append(parts[2 * i + 2])
            sql = self._by_lengths[lengths] = "".join(rendered)
        return sql


def _insert_defaults(statement: Statement, keys: Sequence[str]) -> dict[str, Any]:
    """The values SQLAlchemy would fill in for an INSERT's columns missing from ``keys``:
    plain-value defaults. A computed default must be given by the caller instead."""
    if not isinstance(statement, Insert):
        return {}
    found: dict[str, Any] = {}
    for column in getattr(statement.table, "columns", ()):
        default = column.default
        if column.key in keys or default is None:
            continue
        if not getattr(default, "is_scalar", False):
            raise PreparedError(f"give {column.key!r}: its default is computed")
        found[column.key] = default.arg
    return found


class Rows:
    """A prepared statement's result on SQLite: what the callers use of SQLAlchemy's."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return self._rows

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        if not self._rows:
            raise sa.exc.NoResultFound("No row was found when one was required")
        if len(self._rows) > 1:
            raise sa.exc.MultipleResultsFound("Multiple rows were found when one was required")
        return self._rows[0]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]


class Prepared:
    """A Core statement run as prepared SQL on SQLite (see the module docstring)."""

    __slots__ = ("_plans", "statement")

    def __init__(self, statement: Statement) -> None:
        self.statement = statement
        self._plans: dict[tuple[int, tuple[str, ...]], _Plan] = {}

    def run(self, conn: Connection, params: Params | Sequence[Params] | None = None) -> Any:
        """Execute in ``conn``'s transaction; a result with ``first``, ``all``, ``one``,
        ``scalar``, ``scalar_one``, iteration and ``rowcount`` on either database."""
        dialect = conn.dialect
        if dialect.name == "sqlite":
            return self._run_sqlite(conn, params)
        if dialect.driver == "asyncpg":
            return self._run_asyncpg(conn, params)
        return conn.execute(cast(Executable, self.statement), params)

    def _split(
        self, params: Params | Sequence[Params] | None
    ) -> tuple[Params, Sequence[Params] | None]:
        """The first (or only) parameter set, and all of them for a multi-row statement."""
        if params is None or isinstance(params, Mapping):
            return params or {}, None
        first = params[0] if params else {}
        if any(p.keys() != first.keys() for p in params):
            raise PreparedError("every row of a multi-row statement needs the same keys")
        return first, params

    def _run_sqlite(self, conn: Connection, params: Params | Sequence[Params] | None) -> Any:
        dialect = conn.dialect
        first, many = self._split(params)
        if many is not None and not many:
            return Rows([], 0)
        plan = self._plan(dialect, first)
        if many is not None and plan.expands:
            raise PreparedError("an IN list cannot be expanded in a multi-row statement")
        raw = conn.connection.driver_connection
        assert raw is not None
        cursor = raw.cursor()
        try:
            if many is not None:
                cursor.executemany(plan.sql, [plan.values(p)[0] for p in many])
                return Rows([], cursor.rowcount)
            values, lengths = plan.values(first)
            cursor.execute(plan.sql_for(lengths), values)
            if plan.row is None:
                return Rows([], cursor.rowcount)
            return Rows(_shape(plan, cursor.fetchall()), cursor.rowcount)
        except dialect.loaded_dbapi.Error as exc:
            # As SQLAlchemy raises it (IntegrityError, OperationalError...), so callers and
            # the problem mapper see one kind of error whichever way a statement ran.
            raise sa.exc.DBAPIError.instance(
                plan.sql, None, exc, dialect.loaded_dbapi.Error
            ) from exc
        finally:
            cursor.close()

    def _run_asyncpg(self, conn: Connection, params: Params | Sequence[Params] | None) -> Any:
        first, many = self._split(params)
        if many is not None and not many:
            return Rows([], 0)
        plan = self._plan(conn.dialect, first)
        if plan.expands or plan.returns:
            return conn.execute(cast(Executable, self.statement), params)
        if many is None and plan.row is None:
            return Rows([], _execute_asyncpg(conn, plan.sql, plan.values(first)[0]))
        pooled = conn.connection
        raw = pooled.driver_connection
        assert raw is not None
        _count(pooled)
        try:
            if many is not None:
                return Rows([], _insert_rows(raw, plan, many))
            records = await_only(raw.fetch(plan.sql, *plan.values(first)[0]))
        except Exception as exc:
            raise translated(pooled, plan.sql, exc) from exc
        return Rows(_shape(plan, records), len(records))

    async def fetch_asyncpg(
        self, pooled: PoolProxiedConnection, dialect: Dialect, params: Params
    ) -> Rows:
        """A SELECT without an IN list, straight on ``pooled``'s asyncpg connection, with
        no SQLAlchemy ``Connection`` around it (``Database.fetch``)."""
        plan = self._plan(dialect, params)
        if plan.expands or plan.returns or plan.row is None:
            raise PreparedError("only a SELECT without an IN list is fetched on its own")
        raw = pooled.driver_connection
        assert raw is not None
        _count(pooled)
        try:
            records = await raw.fetch(plan.sql, *plan.values(params)[0])
        except Exception as exc:
            raise translated(pooled, plan.sql, exc) from exc
        return Rows(_shape(plan, records), len(records))

    def _plan(self, dialect: Dialect, params: Params) -> _Plan:
        key = (id(dialect), tuple(params) if isinstance(self.statement, Insert) else ())
        plan = self._plans.get(key)
        if plan is None or plan.dialect is not dialect:
            plan = self._plans[key] = _Plan(self.statement, dialect, tuple(params))
        return plan


def run_together(
    conn: Connection, parts: Sequence[tuple[Prepared, Params | Sequence[Params] | None]]
) -> int:
    """Statements whose rows nobody reads back, in ``conn``'s transaction; the rows the last
    one changed. On asyncpg they go as one statement — the others as data-modifying CTEs
    (``WITH s0 AS (INSERT ...), s1 AS (INSERT ...) UPDATE ...``): one round trip instead of
    one each. They then all see the database as it was before that statement, and foreign
    keys are checked at its end, so none may need another's rows to be visible to it (rows
    it only references are fine). Elsewhere, or when one of them cannot be part of such a
    statement (an IN list, RETURNING, a SELECT, more rows than one statement takes), each
    runs on its own, in order."""
    given = [(statement, params) for statement, params in parts if params]
    if not given:
        return 0
    if conn.dialect.driver == "asyncpg" and len(given) > 1:
        together = _together(conn.dialect, given)
        if together is not None:
            return _execute_asyncpg(conn, *together)
    changed = 0
    for statement, params in given:
        changed = int(statement.run(conn, params).rowcount)
    return changed


def _together(
    dialect: Dialect, parts: Sequence[tuple[Prepared, Params | Sequence[Params]]]
) -> tuple[str, list[Any]] | None:
    """The one statement of ``run_together`` and its values, or None when it cannot be."""
    shape: list[tuple[_Plan, int]] = []  # each plan, with its rows (0: a single statement)
    values: list[Any] = []
    rows: Sequence[Params]
    for statement, params in parts:
        first, many = statement._split(params)
        plan = statement._plan(dialect, first)
        if not plan.combinable:
            return None
        if many is None:
            shape.append((plan, 0))
            rows = [first]
        elif len(many) <= plan.rows_per_statement:
            shape.append((plan, len(many)))
            rows = many
        else:
            return None
        for row in rows:
            values += plan.values(row)[0]
    return _within_cap(_TOGETHER, tuple(shape), _together_sql, values)


_Shape = tuple[tuple["_Plan", int], ...]


def _within_cap(
    texts: dict[_Shape, str], shape: _Shape, build: Callable[[_Shape], str], values: list[Any]
) -> tuple[str, list[Any]] | None:
    """The combined statement of ``shape`` (the text ``build`` makes, built once) and its
    ``values``, or None when they are more than one statement may carry."""
    if len(values) > MAX_PARAMETERS:
        return None
    sql = texts.get(shape)
    if sql is None:
        sql = build(shape)
        if len(texts) >= _TOGETHER_KEPT:
            texts.clear()  # a bound on odd shapes; the common ones come straight back
        texts[shape] = sql
    return sql, values


# The text of each statement ``_together`` has built, by the plans and row counts it is made
# of: renumbering every piece's placeholders anew each call cost ~5% of an accepted trigger.
_TOGETHER: dict[_Shape, str] = {}
_TOGETHER_KEPT = 4096


def _together_sql(shape: _Shape) -> str:
    pieces: list[str] = []
    numbered = 0
    for plan, rows in shape:
        sql = plan.sql_rows(rows) if rows else plan.sql
        pieces.append(_shifted(sql, numbered))
        numbered += len(plan.slots) * max(rows, 1)
    *ctes, last = pieces
    with_clause = ", ".join(f"s{i} AS ({sql})" for i, sql in enumerate(ctes))
    return f"WITH {with_clause} {last}"


# The common table expression a statement of ``if_created`` names its first row by.
CREATED = "created"
_IF_ROW = f"EXISTS (SELECT FROM {CREATED})"
# The same condition for a part written as text (``if_created`` requires it to be named).
IF_CREATED_ROW = _IF_ROW
_HOW_MANY = f"SELECT count(*) FROM {CREATED}"  # noqa: S608 - a fixed name, no value


def created() -> sa.Exists:
    """``EXISTS (SELECT * FROM created)``: true when the first statement of an
    ``if_created`` statement inserted its row. For a part that is not a plain INSERT (an
    UPDATE) to name in its own WHERE."""
    return sa.exists().select_from(sa.table(CREATED))


def if_created(
    dialect: Dialect,
    first: tuple[Prepared, Params],
    parts: Sequence[tuple[Prepared, Params | Sequence[Params] | None]],
) -> tuple[str, list[Any]] | None:
    """One PostgreSQL statement, to run on its own (it is its own transaction): ``first``, an
    ``INSERT ... SELECT`` whose conditions may insert nothing, then each of ``parts`` only if
    it inserted its row. A plain ``INSERT ... VALUES`` part becomes ``INSERT ... SELECT *
    FROM (VALUES ...) AS v WHERE EXISTS (SELECT FROM created)``; any other part must name
    that condition itself (``created()``). All or nothing: the statement either writes every
    part or, when ``first`` inserted nothing, writes nothing at all, and a part's error (a
    CHECK) undoes the whole. Its one row says how many rows ``first`` inserted. None when
    some part cannot be written this way (an IN list, RETURNING, a SELECT, too many values,
    a part that does not name the condition)."""
    given = [(statement, params) for statement, params in parts if params]
    run_plan = first[0]._plan(dialect, first[1])
    if not run_plan.combinable:
        return None
    shape: list[tuple[_Plan, int]] = [(run_plan, 0)]
    values = run_plan.values(first[1])[0]
    for statement, params in given:
        head, many = statement._split(params)
        plan = statement._plan(dialect, head)
        if not plan.combinable:
            return None
        rows = many if many is not None else [head]
        if plan.rows_per_statement:
            if len(rows) > plan.rows_per_statement:
                return None
            shape.append((plan, len(rows)))
        elif many is None and f"FROM {CREATED}" in plan.sql:
            shape.append((plan, 0))
        else:
            return None
        for row in rows:
            values += plan.values(row)[0]
    return _within_cap(_IF_CREATED, tuple(shape), _if_created_sql, values)


_IF_CREATED: dict[_Shape, str] = {}


def _if_created_sql(shape: _Shape) -> str:
    (first, _), *parts = shape
    pieces = [f"{CREATED} AS ({first.sql} RETURNING 1)"]
    numbered = len(first.slots)
    for i, (plan, rows) in enumerate(parts):
        if rows:
            assert plan._values is not None
            head, row = plan._values
            tuples = ", ".join(_shifted(row, numbered + r * len(plan.slots)) for r in range(rows))
            into = head.removesuffix(" VALUES ")
            # Compiled statements and placeholders only: no value is in the text.
            sql = f"{into} SELECT * FROM (VALUES {tuples}) AS v WHERE {_IF_ROW}"  # noqa: S608
        else:
            sql = _shifted(plan.sql, numbered)
        pieces.append(f"s{i} AS ({sql})")
        numbered += len(plan.slots) * max(rows, 1)
    return f"WITH {', '.join(pieces)} {_HOW_MANY}"


def _execute_asyncpg(conn: Connection, sql: str, values: list[Any]) -> int:
    """``sql`` on the asyncpg connection under ``conn``, in its transaction, counted and
    with its errors as SQLAlchemy raises them; the rows it changed (-1 when not said)."""
    pooled = conn.connection
    raw = pooled.driver_connection
    assert raw is not None
    _count(pooled)
    try:
        return _changed(await_only(raw.execute(sql, *values)))
    except Exception as exc:
        raise translated(pooled, sql, exc) from exc


def _count(pooled: PoolProxiedConnection) -> None:
    count = pooled.info.get(STATEMENT_COUNTER)
    if count is not None:
        count()


def _changed(status: str | None) -> int:
    """The rows a command changed, from its status (``INSERT 0 3``); -1 when not said."""
    found = _ROWCOUNT.search(status or "")
    return int(found.group(1)) if found else -1


def _shifted(sql: str, by: int) -> str:
    """``sql`` with each ``$n`` placeholder numbered ``by`` higher."""
    return _DOLLAR.sub(lambda found: f"${int(found.group(1)) + by}", sql)


def _insert_rows(raw: Any, plan: _Plan, many: Sequence[Params]) -> int:
    """A multi-row statement on asyncpg: an INSERT as one statement per
    ``rows_per_statement`` rows (one execution on the server, not one per row); anything
    else through asyncpg's executemany (one round trip, one execution per row). The rows
    changed, or -1 when asyncpg does not say."""
    per = plan.rows_per_statement
    if not per:
        await_only(raw.executemany(plan.sql, [plan.values(p)[0] for p in many]))
        return -1
    changed = 0
    for start in range(0, len(many), per):
        chunk = many[start : start + per]
        values = [v for p in chunk for v in plan.values(p)[0]]
        changed += max(0, _changed(await_only(raw.execute(plan.sql_rows(len(chunk)), *values))))
    return changed


def _shape(plan: _Plan, fetched: list[Any]) -> list[Any]:
    row = plan.row
    assert row is not None
    if not plan.has_results:
        return [row._make(values) for values in fetched]  # type: ignore[attr-defined]
    processors = plan.results
    return [
        row._make(  # type: ignore[attr-defined]
            [p(v) if p else v for p, v in zip(processors, values, strict=True)]
        )
        for values in fetched
    ]


def translated(pooled: PoolProxiedConnection, sql: str, exc: Exception) -> Exception:
    """``exc``, raised by asyncpg, as SQLAlchemy raises it from a statement (IntegrityError,
    OperationalError...): translated by SQLAlchemy's own asyncpg adapter, so callers and the
    problem mapper see one kind of error whichever way a statement ran."""
    adapted: Any = pooled.dbapi_connection
    dbapi_error = adapted.dbapi.Error
    try:
        adapted._handle_exception(exc)
    except dbapi_error as translated_exc:
        error: Exception = sa.exc.DBAPIError.instance(sql, None, translated_exc, dbapi_error)
        return error
    except Exception as other:
        return other
    return exc
