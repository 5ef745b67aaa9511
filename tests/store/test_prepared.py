"""Prepared statements on SQLite and on PostgreSQL (asyncpg) give what SQLAlchemy's own
execution gives: the same values (datetimes, JSON, booleans, NULLs), the same rows, the
same errors; on PostgreSQL also what db/engine.py promises around them (one transaction a
write, none a read, closed connections replaced without a ping)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from nodeloom.db.engine import Database, _json_dumps
from nodeloom.db.prepared import Prepared, PreparedError, created, if_created, run_together
from nodeloom.settings import Settings
from tests.conftest import TEST_SECRET, postgres_database
from tests.services import POSTGRES_ADMIN_URL, require_postgres

metadata = sa.MetaData()
items = sa.Table(
    "items",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("n", sa.Integer, default=7),
    sa.Column("at", sa.DateTime),
    sa.Column("doc", sa.JSON),
    sa.Column("flag", sa.Boolean, default=False),
    sa.Column("label", sa.String(50)),
)
computed = sa.Table(
    "computed",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("stamp", sa.DateTime, default=datetime.now),
)

INSERT = Prepared(sa.insert(items))
BY_IDS = Prepared(
    sa.select(items.c.id, items.c.n, items.c.at, items.c.doc, items.c.flag, items.c.label)
    .where(items.c.id.in_(sa.bindparam("ids", expanding=True)))
    .order_by(items.c.id)
)
FLAGGED = Prepared(
    sa.update(items)
    .where(items.c.id == sa.bindparam("id"), items.c.n.in_([7, 8]))
    .values(flag=True, label=None)
)
COUNT = Prepared(sa.select(sa.func.count(items.c.id).label("count")))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'p.db'}", json_serializer=_json_dumps)
    metadata.create_all(engine)
    yield engine
    engine.dispose()


def rows(conn: sa.Connection) -> list[tuple[object, ...]]:
    ids = {"ids": ["a", "b", "c"]}
    prepared = [tuple(r) for r in BY_IDS.run(conn, ids).all()]
    assert prepared == [tuple(r) for r in conn.execute(BY_IDS.statement, ids).all()]  # type: ignore[call-overload]
    return prepared


class TestPrepared:
    def test_values_round_trip_as_sqlalchemy_reads_them(self, engine: sa.Engine) -> None:
        at = datetime(2026, 11, 24, 21, 42, 31, 290928)
        with engine.begin() as conn:
            inserted = INSERT.run(
                conn,
                [
                    {
                        "id": "a",
                        "at": at,
                        "doc": {"k": [1, "é", None]},
                        "flag": True,
                        "label": None,
                    },
                    {"id": "b", "at": None, "doc": None, "flag": False, "label": "x"},
                ],
            )
            assert inserted.rowcount == 2
            found = rows(conn)
        assert found == [
            ("a", 7, at, {"k": [1, "é", None]}, True, None),
            ("b", 7, None, None, False, "x"),
        ]
        with engine.connect() as conn:
            row = BY_IDS.run(conn, {"ids": ["a"]}).one()
            assert (row.id, row.at, row.doc["k"][1], row.flag) == ("a", at, "é", True)

    def test_fixed_values_and_in_lists(self, engine: sa.Engine) -> None:
        with engine.begin() as conn:
            INSERT.run(conn, [{"id": i, "label": "l"} for i in "abc"])
            conn.execute(sa.update(items).where(items.c.id == "c").values(n=9))
            assert FLAGGED.run(conn, {"id": "a"}).rowcount == 1
            assert FLAGGED.run(conn, {"id": "c"}).rowcount == 0  # n=9 is not in (7, 8)
            assert rows(conn) == rows(conn)
            assert [(r.id, r.flag, r.label) for r in BY_IDS.run(conn, {"ids": list("abc")})] == [
                ("a", True, None),
                ("b", False, "l"),
                ("c", False, "l"),
            ]
            assert BY_IDS.run(conn, {"ids": []}).all() == []
            assert BY_IDS.run(conn, {"ids": ["zz"]}).first() is None
            assert COUNT.run(conn).scalar() == 3 == COUNT.run(conn).scalar_one()

    def test_a_union_gives_its_rows_by_name(self, engine: sa.Engine) -> None:
        def newest(label: str) -> sa.Select[tuple[str, int, datetime | None]]:
            newest = (
                sa.select(items.c.id, items.c.n, items.c.at)
                .where(items.c.label == sa.bindparam(label))
                .order_by(items.c.id.desc())
                .limit(1)
                .subquery()
            )
            return sa.select(newest)

        union = Prepared(sa.union_all(newest("first"), newest("second")))
        at = datetime(2026, 11, 25, 1, 2, 3, 4)
        with engine.begin() as conn:
            INSERT.run(
                conn, [{"id": i, "label": "x" if i < "c" else "y", "at": at} for i in "abcd"]
            )
            found = union.run(conn, {"first": "x", "second": "y"}).all()
            assert [(r.id, r.at) for r in found] == [("b", at), ("d", at)]
            assert found == conn.execute(union.statement, {"first": "x", "second": "y"}).all()  # type: ignore[call-overload]

    def test_errors_are_sqlalchemys(self, engine: sa.Engine) -> None:
        with engine.begin() as conn:
            INSERT.run(conn, {"id": "a"})
            with pytest.raises(sa.exc.IntegrityError):
                INSERT.run(conn, {"id": "a"})
            with pytest.raises(sa.exc.NoResultFound):
                BY_IDS.run(conn, {"ids": ["missing"]}).one()

    def test_rows_of_a_multi_row_statement_have_the_same_keys(self, engine: sa.Engine) -> None:
        with engine.begin() as conn:
            with pytest.raises(PreparedError):
                INSERT.run(conn, [{"id": "a"}, {"id": "b", "label": "x"}])
            assert INSERT.run(conn, []).rowcount == 0

    def test_an_in_list_is_refused_in_a_multi_row_statement(self, engine: sa.Engine) -> None:
        with engine.begin() as conn, pytest.raises(PreparedError):
            BY_IDS.run(conn, [{"ids": ["a"]}, {"ids": ["b", "c"]}])

    def test_a_computed_default_must_be_given(self, engine: sa.Engine) -> None:
        with engine.begin() as conn, pytest.raises(PreparedError):
            Prepared(sa.insert(computed)).run(conn, {"id": "a"})

    def test_statements_run_together_run_in_order(self, engine: sa.Engine) -> None:
        with engine.begin() as conn:
            together = [
                (INSERT, [{"id": "a", "n": 7}, {"id": "c", "n": 9}]),
                (FLAGGED, {"id": "a"}),
            ]
            assert run_together(conn, together) == 1  # the count of the last
            assert run_together(conn, [(INSERT, []), (FLAGGED, {"id": "c"})]) == 0
            assert [(r.id, r.flag) for r in BY_IDS.run(conn, {"ids": ["a", "c"]})] == [
                ("a", True),
                ("c", False),
            ]

    def test_runs_in_the_callers_transaction(self, engine: sa.Engine) -> None:
        with engine.connect() as conn:
            with conn.begin() as transaction:
                INSERT.run(conn, {"id": "a"})
                transaction.rollback()
            assert COUNT.run(conn).scalar() == 0

    @settings(max_examples=50, deadline=None)
    @given(
        labels=st.lists(st.text(max_size=20).filter(lambda t: "\x00" not in t), max_size=5),
        doc=st.recursive(
            st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=10,
        ),
    )
    def test_any_values(self, labels: list[str], doc: object) -> None:
        engine = sa.create_engine("sqlite://", json_serializer=_json_dumps)
        metadata.create_all(engine)
        with engine.begin() as conn:
            INSERT.run(conn, [{"id": str(i), "label": v, "doc": doc} for i, v in enumerate(labels)])
            ids = {"ids": [str(i) for i in range(len(labels))]}
            got = [(r.label, r.doc) for r in BY_IDS.run(conn, ids)]
            want = [(r.label, r.doc) for r in conn.execute(BY_IDS.statement, ids)]  # type: ignore[call-overload]
        assert got == want == [(v, doc) for v in labels]
        engine.dispose()


def test_unlabeled_and_keyword_columns_come_back_by_index(tmp_path: Path) -> None:
    """A column without a key (an unlabeled aggregate) or named like a Python keyword still
    makes rows; such a column is read by index, as in SQLAlchemy's own rows."""
    table = sa.table("t", sa.column("a"), sa.column("b"))
    query = Prepared(
        sa.select(table.c.a, sa.func.sum(table.c.b), table.c.b.label("class")).group_by(table.c.a)
    )
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'k.db'}")
    with engine.begin() as conn:
        conn.execute(sa.text("create table t (a text, b integer)"))
        conn.execute(sa.text("insert into t values ('x', 2), ('x', 3)"))
        (row,) = query.run(conn).all()
    assert row[0] == "x" and row[1] == 5 and row[2] in (2, 3)


def test_a_plan_keeps_the_dialect_it_was_compiled_for(tmp_path: Path) -> None:
    """Plans are found by the id of their dialect: a dialect collected after its engine was
    dropped could hand its id to a new engine's dialect (another database's), which would
    then be given the old dialect's SQL. So a plan keeps its dialect, and a statement run on
    many engines in turn is compiled for each."""
    query = Prepared(sa.select(sa.literal(1).label("one")))
    collected: list[weakref.ref[Any]] = []
    # What the suite made before stays out of the collections below: late in a full run the
    # heap is gigabytes, and 20 full collections of it outlasted the test's timeout.
    gc.freeze()
    try:
        for i in range(20):
            engine = sa.create_engine(f"sqlite:///{tmp_path / f'd{i}.db'}")
            with engine.connect() as conn:
                assert query.run(conn).all()[0][0] == 1
            collected.append(weakref.ref(engine.dialect))
            engine.dispose()
            del engine, conn
            gc.collect()
    finally:
        gc.unfreeze()
    assert all(ref() is not None for ref in collected)


@contextlib.asynccontextmanager
async def postgres_admin() -> AsyncIterator[AsyncConnection]:
    engine = create_async_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            yield conn
    finally:
        await engine.dispose()


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[Database]:
    """A ``Database`` on a PostgreSQL database of its own, holding the ``items`` table."""
    require_postgres()
    async with postgres_database() as url:
        db = Database(
            Settings(data_dir=tmp_path, secret_key=TEST_SECRET, database_url=url).prepare()
        )
        try:
            await db.write(lambda conn: metadata.create_all(conn))
            yield db
        finally:
            await db.dispose()


FLAG = Prepared(
    sa.update(items).where(items.c.id == sa.bindparam("key")).values(flag=True, label=None)
)


# An item, unless one with its label exists: the first statement of an ``if_created`` one.
INSERT_UNLESS_LABELLED = Prepared(
    sa.insert(items).from_select(
        ["id", "label"],
        sa.select(
            sa.bindparam("id", type_=items.c.id.type),
            sa.bindparam("label", type_=items.c.label.type),
        ).where(~sa.exists().where(items.c.label == sa.bindparam("label"))),
    )
)
FLAG_IF_CREATED = Prepared(
    sa.update(items).where(items.c.id == sa.bindparam("key"), created()).values(flag=True)
)


class TestOnPostgres:
    """The same plans run on asyncpg's connection, in ``db.write``'s transaction."""

    async def test_values_rows_and_counts_are_sqlalchemys(self, pg: Database) -> None:
        at = datetime(2026, 11, 24, 21, 42, 31, 290928)
        statements = pg.statements

        def write(conn: sa.Connection) -> None:
            INSERT.run(
                conn,
                [
                    {"id": "a", "at": at, "doc": {"k": [1, "é"]}, "flag": True, "label": None},
                    {"id": "b", "at": None, "doc": None, "flag": False, "label": "x"},
                ],
            )
            INSERT.run(conn, {"id": "c", "label": "l"})
            assert FLAG.run(conn, {"key": "b"}).rowcount == 1
            assert FLAG.run(conn, {"key": "zz"}).rowcount == 0

        await pg.write(write)
        assert pg.statements - statements == 4  # counted for /metrics as any statement
        by_id = Prepared(sa.select(items).where(items.c.id == sa.bindparam("id")))

        def read(conn: sa.Connection) -> list[tuple[object, ...]]:
            found = [tuple(by_id.run(conn, {"id": i}).one()) for i in "abc"]
            assert found == [tuple(conn.execute(by_id.statement, {"id": i}).one()) for i in "abc"]  # type: ignore[call-overload]
            assert by_id.run(conn, {"id": "zz"}).first() is None
            assert COUNT.run(conn).scalar_one() == 3
            row = by_id.run(conn, {"id": "a"}).one()
            assert (row.id, row.at, row.doc["k"][1], row.flag) == ("a", at, "é", True)
            return [tuple(r) for r in BY_IDS.run(conn, {"ids": ["a", "b"]})]  # an IN list

        assert await pg.read(read) == [
            ("a", 7, at, {"k": [1, "é"]}, True, None),
            ("b", 7, None, None, True, None),
        ]

    async def test_many_rows_go_in_statements_of_at_most_32767_parameters(
        self, pg: Database
    ) -> None:
        rows = [{"id": f"{i:05}", "label": str(i)} for i in range(6_000)]  # 6 columns a row
        changed = await pg.write(lambda conn: INSERT.run(conn, rows).rowcount)
        assert changed == 6_000
        found = await pg.read(lambda conn: conn.execute(sa.select(items.c.id, items.c.n)).all())
        assert sorted(found) == [(f"{i:05}", 7) for i in range(6_000)]

    async def test_errors_are_sqlalchemys_and_nothing_of_the_transaction_is_kept(
        self, pg: Database
    ) -> None:
        def twice(conn: sa.Connection) -> None:
            INSERT.run(conn, {"id": "a"})
            INSERT.run(conn, {"id": "a"})

        with pytest.raises(sa.exc.IntegrityError):
            await pg.write(twice)
        assert await pg.read(lambda conn: COUNT.run(conn).scalar_one()) == 0

        def then_fail(conn: sa.Connection) -> None:
            INSERT.run(conn, {"id": "b"})
            raise RuntimeError("refused")

        with pytest.raises(RuntimeError):
            await pg.write(then_fail)
        await pg.write(lambda conn: INSERT.run(conn, {"id": "c"}))
        kept = await pg.read(lambda conn: [r.id for r in BY_IDS.run(conn, {"ids": list("abc")})])
        assert kept == ["c"]

    async def test_statements_run_together_are_one_statement_with_the_last_ones_count(
        self, pg: Database
    ) -> None:
        statements = pg.statements
        rows = [{"id": "a", "label": "x"}, {"id": "b", "label": "y"}]

        def write(conn: sa.Connection) -> tuple[int, int]:
            INSERT.run(conn, {"id": "c"})
            together = [(INSERT, rows), (INSERT, {"id": "d"}), (INSERT, []), (FLAG, {"key": "c"})]
            return run_together(conn, together), run_together(conn, [(FLAG, {"key": "zz"})])

        assert await pg.write(write) == (1, 0)
        assert pg.statements - statements == 3  # the INSERT, the four together, the last
        flags = await pg.read(lambda conn: conn.execute(sa.select(items.c.id, items.c.flag)).all())
        assert sorted(flags) == [("a", False), ("b", False), ("c", True), ("d", False)]

    async def test_statements_run_together_again_with_other_row_counts_write_their_own_rows(
        self, pg: Database
    ) -> None:
        # The combined text is kept by the shape of its parts (plans and row counts): the
        # same shape again, or another, must each number their values as their own.
        def write(first: list[str], second: list[str]) -> Callable[[sa.Connection], None]:
            def together(conn: sa.Connection) -> None:
                run_together(
                    conn,
                    [
                        (INSERT, [{"id": i, "label": f"one {i}"} for i in first]),
                        (INSERT, [{"id": i, "label": f"two {i}"} for i in second]),
                    ],
                )

            return together

        await pg.write(write(["a"], ["b", "c"]))
        await pg.write(write(["d", "e"], ["f"]))
        await pg.write(write(["g"], ["h", "i"]))
        labels = await pg.read(lambda c: c.execute(sa.select(items.c.id, items.c.label)).all())
        assert sorted(labels) == [
            ("a", "one a"), ("b", "two b"), ("c", "two c"), ("d", "one d"), ("e", "one e"),
            ("f", "two f"), ("g", "one g"), ("h", "two h"), ("i", "two i"),
        ]  # fmt: skip

    async def test_an_error_in_statements_run_together_is_sqlalchemys_and_keeps_nothing(
        self, pg: Database
    ) -> None:
        def clash(conn: sa.Connection) -> None:
            INSERT.run(conn, {"id": "a"})
            run_together(conn, [(INSERT, {"id": "b"}), (INSERT, [{"id": "a"}])])

        with pytest.raises(sa.exc.IntegrityError):
            await pg.write(clash)
        assert await pg.read(lambda conn: COUNT.run(conn).scalar_one()) == 0

    async def test_statements_if_created_write_everything_or_nothing(self, pg: Database) -> None:
        await pg.write(lambda conn: INSERT.run(conn, {"id": "old", "label": "taken"}))
        assert pg.engine is not None
        dialect = pg.engine.dialect

        async def write(label: str, rows: list[dict[str, Any]]) -> int:
            statement = if_created(
                dialect,
                (INSERT_UNLESS_LABELLED, {"id": f"first {label}", "label": label}),
                [(INSERT, rows), (INSERT, []), (FLAG_IF_CREATED, {"key": "old"})],
            )
            assert statement is not None
            statements = pg.statements
            row = await pg.fetch_row_alone(*statement[:1], *statement[1])
            assert pg.statements - statements == 1
            return int(row[0])

        async def contents() -> list[tuple[object, ...]]:
            query = sa.select(items.c.id, items.c.label, items.c.flag).order_by(items.c.id)
            return [tuple(r) for r in await pg.read(lambda c: c.execute(query).all())]

        # The first statement inserts nothing: neither do the others.
        assert await write("taken", [{"id": "x", "label": "x"}]) == 0
        assert await contents() == [("old", "taken", False)]
        # It inserts its row: so do the others, each row with its own values.
        assert await write("new", [{"id": "a", "label": "1"}, {"id": "b", "label": "2"}]) == 1
        assert await write("newer", [{"id": "c", "label": "3"}]) == 1
        assert await contents() == [
            ("a", "1", False), ("b", "2", False), ("c", "3", False), ("first new", "new", False),
            ("first newer", "newer", False), ("old", "taken", True),
        ]  # fmt: skip
        # A part's error undoes the whole statement, the first row included.
        with pytest.raises(sa.exc.IntegrityError):
            await write("newest", [{"id": "d", "label": "4"}, {"id": "a", "label": "again"}])
        assert len(await contents()) == 6

    async def test_a_part_that_does_not_name_the_condition_is_refused(self, pg: Database) -> None:
        # An UPDATE without ``created()`` would run whether or not the first row was inserted.
        assert pg.engine is not None
        first = (INSERT_UNLESS_LABELLED, {"id": "i", "label": "l"})
        assert if_created(pg.engine.dialect, first, [(FLAG, {"key": "i"})]) is None
        assert if_created(pg.engine.dialect, first, [(BY_IDS, {"ids": ["i"]})]) is None

    async def test_a_write_is_one_transaction_and_a_read_none(self, pg: Database) -> None:
        xid = sa.text("select pg_current_xact_id_if_assigned()")

        def write(conn: sa.Connection) -> tuple[object, object]:
            INSERT.run(conn, {"id": "a"})
            first = conn.execute(xid).scalar()
            INSERT.run(conn, {"id": "b"})
            return first, conn.execute(xid).scalar()

        first, second = await pg.write(write)
        assert first is not None and first == second

        # A read runs its statements outside any transaction block (at READ COMMITTED each
        # statement had its own snapshot anyway).
        def read(conn: sa.Connection) -> bool:
            assert COUNT.run(conn).scalar_one() == 2
            raw = conn.connection.driver_connection
            assert raw is not None
            return bool(raw.is_in_transaction())  # as the server's last answer said

        assert await pg.read(read) is False

    async def test_a_connection_the_server_closed_is_replaced_unnoticed(self, pg: Database) -> None:
        await pg.write(lambda conn: INSERT.run(conn, {"id": "a"}))
        await pg.read(lambda conn: COUNT.run(conn).scalar_one())  # the pool holds a connection
        pid = sa.text("select pg_backend_pid()")
        before = await pg.read(lambda conn: conn.execute(pid).scalar_one())
        async with postgres_admin() as admin:
            await admin.execute(sa.text("select pg_terminate_backend(:p)"), {"p": before})
        await asyncio.sleep(0.2)  # the server's goodbye reaches asyncpg
        assert await pg.read(lambda conn: COUNT.run(conn).scalar_one()) == 1
        assert await pg.read(lambda conn: conn.execute(pid).scalar_one()) != before

    async def test_a_fetch_is_a_read_on_a_connection_straight_from_the_pool(
        self, pg: Database
    ) -> None:
        # ``fetch`` checks its connection out of the pool itself: the same rows as a read,
        # counted as a statement, and tried again elsewhere when the server was closing the
        # connection it got.
        await pg.write(lambda conn: INSERT.run(conn, {"id": "a"}))
        with pg.counting() as sent:
            assert (await pg.fetch(COUNT, {})).scalar_one() == 1
        assert sent.n == 1
        pid = sa.text("select pg_backend_pid()")
        async with postgres_admin() as admin:
            for _ in range(10):
                backend = await pg.read(lambda conn: conn.execute(pid).scalar_one())
                await admin.execute(sa.text("select pg_terminate_backend(:p)"), {"p": backend})
                assert (await pg.fetch(COUNT, {})).scalar_one() == 1

    async def test_a_connection_the_server_is_closing_right_now_costs_no_error(
        self, pg: Database
    ) -> None:
        # No pause after the termination: the server's goodbye is still on its way when the
        # next statement is sent on the pooled connection, as when a restart of PostgreSQL
        # meets a busy API. The read, and the write (at its BEGIN), go to another connection.
        pid = sa.text("select pg_backend_pid()")
        async with postgres_admin() as admin:
            for i in range(20):
                backend = await pg.read(lambda conn: conn.execute(pid).scalar_one())
                await admin.execute(sa.text("select pg_terminate_backend(:p)"), {"p": backend})
                if i % 2:
                    await pg.write(lambda conn, i=i: INSERT.run(conn, {"id": f"w{i}"}))
                else:
                    assert await pg.read(lambda conn: conn.execute(pid).scalar_one()) != backend
        assert await pg.read(lambda conn: COUNT.run(conn).scalar_one()) == 10
