"""Prepared statements on SQLite give what SQLAlchemy's own execution gives: the same
values (datetimes, JSON, booleans, NULLs), the same rows, the same errors."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeloom.db.engine import _json_dumps
from nodeloom.db.prepared import Prepared, PreparedError

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
